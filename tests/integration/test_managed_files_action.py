"""gpufleet.cluster.managed_files run for real: ansible-playbook on localhost (connection local) into a temporary
directory, through the action plugin. Its rendering is compared byte for byte with ansible.builtin.template's on the
same templates (a role template with an include, and the fail2ban role's jail), then a second run must change
nothing, a check-mode run must report a drifted file without touching it, a repair must cost one module call for the
whole set where ansible.builtin.template costs two per file, and a no-op on the controller none. The set also holds a directory, files copied verbatim
from the role's files/ directory and from an absolute path (Prometheus rules with {{ $labels }}, binary bytes) and a
path to remove."""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
JAIL = os.path.join(ROOT, "roles", "fail2ban", "templates", "gpufleet.local.j2")

MAIN_TEMPLATE = """{{ ansible_managed | comment }}
# rendered from {{ template_path }} on {{ template_host }}
{% for name in demo_names %}
{{ name }} = {{ loop.index }}
{% endfor %}
{% include 'part.j2' %}
    indented {% if demo_flag %}on{% endif %}

"""
PART_TEMPLATE = "included: {{ demo_names | length }} names\n"
# A Prometheus rule as the shipped ones are written: its {{ }} are Prometheus's, not Jinja's.
RULES = """groups:
  - name: demo
    rules:
      - alert: DemoDown
        expr: up == 0
        annotations:
          summary: "{{ $labels.instance }} is down {% raw %}"
"""
BLOB = bytes(range(256)) + b"{{ not jinja }}\n"

JAIL_VARS = {
    "__fail2ban_ignoreip": ["127.0.0.1/8", "::1", "192.0.2.10"], "fail2ban_bantime": "1h",
    "fail2ban_bantime_maxtime": "1w", "fail2ban_findtime": "10m", "fail2ban_maxretry": 5,
    "fail2ban_banaction": "nftables", "fail2ban_sshd_port": 22,
    "__fail2ban_journalmatch": "_SYSTEMD_UNIT=ssh.service + _COMM=sshd",
}


def write_project(tmp_path):
    role = tmp_path / "roles" / "demo"
    (role / "templates").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "templates" / "main.conf.j2").write_text(MAIN_TEMPLATE)
    (role / "templates" / "part.j2").write_text(PART_TEMPLATE)
    (role / "files").mkdir()
    (role / "files" / "alerts.yml").write_text(RULES)
    (tmp_path / "blob.bin").write_bytes(BLOB)
    out = tmp_path / "out"
    (out / "managed").mkdir(parents=True)
    (out / "template").mkdir()
    (out / "managed" / "stale.conf").write_text("left by an older release\n")
    files = [
        {"src": "main.conf.j2", "dest": str(out / "managed" / "main.conf"), "mode": "0640"},
        {"src": JAIL, "dest": str(out / "managed" / "jail.local"), "mode": "0644"},
        {"content": "literal {{ demo_names | join(',') }}\n", "dest": str(out / "managed" / "literal.conf"),
         "mode": "0600"},
        {"content": "secret-value-1234\n", "dest": str(out / "managed" / "secret.conf"), "mode": "0600",
         "diff": False},
        {"dest": str(out / "managed" / "rules"), "state": "directory", "mode": "0750"},
        {"copy": "alerts.yml", "dest": str(out / "managed" / "rules" / "alerts.yml"), "mode": "0644"},
        {"copy": str(tmp_path / "blob.bin"), "dest": str(out / "managed" / "blob.bin"), "mode": "0600"},
        {"dest": str(out / "managed" / "stale.conf"), "state": "absent"},
    ]
    tasks = [
        {"name": "Write the set", "gpufleet.cluster.managed_files": {
            "files": "{{ demo_files + ([demo_optional] if demo_flag else []) }}"}, "register": "demo_result"},
        {"name": "Write nothing", "gpufleet.cluster.managed_files": {"files": []}, "register": "demo_empty"},
        {"name": "Write the same templates with ansible.builtin.template", "ansible.builtin.template": {
            "src": "{{ item }}", "dest": str(out / "template") + "/{{ item | basename | regex_replace('.j2$', '') }}",
            "mode": "0640"}, "loop": ["main.conf.j2", JAIL]},
    ]
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    play = [{"name": "Managed files", "hosts": "localhost", "gather_facts": False, "roles": ["demo"],
             "vars": dict(JAIL_VARS, demo_names=["alpha", "beta"], demo_flag=True, demo_files=files,
                          demo_optional={"content": "optional\n", "dest": str(out / "managed" / "optional.conf")})}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    return out


def playbook(tmp_path, *extra, callback="ansible.posix.json"):
    cmd = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml"),
           "-e", "ansible_python_interpreter=" + sys.executable] + list(extra)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK=callback, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCALHOST_WARNING="false")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, check=False, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def results(output):
    """{task name: result on localhost} and the stats of a json callback run."""
    doc = json.loads(output)
    tasks = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            tasks[task["task"]["name"].split(" : ", 1)[-1]] = task["hosts"]["localhost"]
    return tasks, doc["stats"]["localhost"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """First run, second run, then a drifted file and a check-mode --diff run: one set of ansible-playbook runs
    for all the tests here (each takes a few seconds)."""
    tmp_path = tmp_path_factory.mktemp("managed_files")
    out = write_project(tmp_path)
    first = results(playbook(tmp_path))
    snapshot_after_first = {p: (out / "managed" / p).read_bytes() for p in os.listdir(str(out / "managed"))
                            if (out / "managed" / p).is_file()}
    second = results(playbook(tmp_path))
    (out / "managed" / "literal.conf").write_text("drifted\n")
    os.chmod(str(out / "managed" / "jail.local"), 0o666)
    check = results(playbook(tmp_path, "--check", "--diff"))
    return dict(out=out, tmp_path=tmp_path, first=first, second=second, check=check,
                snapshot=snapshot_after_first)


def test_rendering_matches_ansible_builtin_template_byte_for_byte(runs):
    out = runs["out"]
    for managed, template in (("main.conf", "main.conf"), ("jail.local", "gpufleet.local")):
        assert (out / "managed" / managed).read_bytes() == (out / "template" / template).read_bytes(), managed
    main = (out / "managed" / "main.conf").read_text()
    # ansible_managed, template_path, the include through the role's templates/ directory, trim_blocks without
    # lstrip_blocks, the include losing its own last newline (Jinja keeps none there) and the trailing blank line,
    # all as the template action renders them.
    assert main == ("#\n# Ansible managed\n#\n# rendered from main.conf.j2 on %s\nalpha = 1\nbeta = 2\n"
                    "included: 2 names    indented on\n\n" % os.uname()[1])
    jail = (out / "managed" / "jail.local").read_text()
    assert "ignoreip = 127.0.0.1/8 ::1 192.0.2.10\n" in jail and "banaction = nftables-multiport\n" in jail


def test_first_run_writes_every_file_the_list_names(runs):
    tasks, stats = runs["first"]
    result = tasks["Write the set"]
    out = runs["out"] / "managed"
    assert result["changed"] is True
    assert result["changed_files"] == [str(out / n) for n in
                                       ("main.conf", "jail.local", "literal.conf", "secret.conf", "rules",
                                        "rules/alerts.yml", "blob.bin", "stale.conf", "optional.conf")]
    assert runs["snapshot"]["literal.conf"] == b"literal alpha,beta\n"  # content is templated like copy's
    assert runs["snapshot"]["secret.conf"] == b"secret-value-1234\n"
    assert oct((out / "secret.conf").stat().st_mode & 0o777) == "0o600"
    assert oct((out / "main.conf").stat().st_mode & 0o777) == "0o640"
    assert tasks["Write nothing"]["changed"] is False and tasks["Write nothing"]["files"] == []


def test_directories_copies_and_removals_go_in_the_same_call(runs):
    out = runs["out"] / "managed"
    assert oct((out / "rules").stat().st_mode & 0o7777) == "0o750"
    # Copied as they are: no templating of Prometheus's {{ }}, the binary bytes unchanged.
    assert (out / "rules" / "alerts.yml").read_text() == RULES
    assert runs["snapshot"]["blob.bin"] == BLOB
    assert not (out / "stale.conf").exists()
    states = {f["dest"]: (f["state"], f["changed"]) for f in runs["first"][0]["Write the set"]["files"]}
    assert states[str(out / "rules")] == ("directory", True) and states[str(out / "stale.conf")] == ("absent", True)
    assert {f["dest"]: f["changed"] for f in runs["second"][0]["Write the set"]["files"]}[str(out / "stale.conf")] \
        is False


def test_second_run_changes_nothing(runs):
    tasks, stats = runs["second"]
    assert stats["changed"] == 0, stats
    assert tasks["Write the set"]["changed"] is False and tasks["Write the set"]["changed_files"] == []


def test_check_mode_reports_the_drift_and_leaves_it(runs):
    tasks, stats = runs["check"]
    out = runs["out"] / "managed"
    result = tasks["Write the set"]
    assert result["changed"] is True
    assert result["changed_files"] == [str(out / "jail.local"), str(out / "literal.conf")]
    assert (out / "literal.conf").read_text() == "drifted\n"
    assert oct((out / "jail.local").stat().st_mode & 0o777) == "0o666"
    assert {"before": "drifted\n", "after": "literal alpha,beta\n", "before_header": str(out / "literal.conf"),
            "after_header": str(out / "literal.conf")} in result["diff"]
    assert {"before": {"mode": "0666"}, "after": {"mode": "0644"}} in [
        {k: d[k] for k in ("before", "after")} for d in result["diff"]]


def test_secret_contents_never_reach_the_output(runs):
    for run in ("first", "second", "check"):
        text = json.dumps(runs[run][0]["Write the set"])
        assert "secret-value-1234" not in text, run


def module_calls(output):
    """{task: module runs} of a -vvv run: one EXEC line per module run on localhost."""
    calls, task = {}, None
    for line in output.splitlines():
        header = re.match(r"^TASK \[(?:demo : )?(.*)\] \*+", line)
        if header:
            task = header.group(1)
            calls[task] = 0
        elif task and line.startswith("<localhost> EXEC") and sys.executable in line:
            calls[task] += 1
    return calls


def test_a_repair_costs_one_module_call_and_a_no_op_on_the_controller_none(runs):
    """The drift the check-mode run left is repaired by one module run for the whole set. The run after it changes
    nothing: the action plugin reads the files itself (connection local, no become) and starts no module, while
    ansible.builtin.template still costs two per file."""
    repair = playbook(runs["tmp_path"], "-vvv", callback="ansible.builtin.default")
    calls = module_calls(repair)
    assert "secret-value-1234" not in repair
    assert calls["Write the set"] == 1, calls  # seven files, a directory and a removal
    assert calls["Write nothing"] == 0, calls
    assert calls["Write the same templates with ansible.builtin.template"] == 4, calls  # two files: stat + file each
    assert (runs["out"] / "managed" / "literal.conf").read_text() == "literal alpha,beta\n"

    no_op = playbook(runs["tmp_path"], "-vvv", callback="ansible.builtin.default")
    calls = module_calls(no_op)
    assert calls["Write the set"] == 0, calls
    assert calls["Write the same templates with ansible.builtin.template"] == 4, calls
    assert "read on the controller; no module run" in no_op and "secret-value-1234" not in no_op
    tasks, stats = results(playbook(runs["tmp_path"]))
    assert stats["changed"] == 0 and tasks["Write the set"]["changed_files"] == []
    assert [f["changed"] for f in tasks["Write the set"]["files"]] == [False] * 9
