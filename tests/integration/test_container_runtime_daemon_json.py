"""The daemon.json merge of gpufleet.cluster.container_runtime (tasks_from: daemon_json), run for real with
ansible-playbook against files in a temporary directory (Docker itself is not touched:
container_runtime_manage_service is false), plus the role's documented defaults."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
VALIDATE = sys.executable + " -c 'import json,sys; json.load(open(sys.argv[1]))' %s"

PLAYBOOK = """
- name: Merge into {path}
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run the daemon.json merge
      ansible.builtin.include_role:
        name: gpufleet.cluster.container_runtime
        tasks_from: daemon_json
      vars:
        container_runtime_daemon_json_path: {path}
        container_runtime_daemon_json_validate: {validate}
        container_runtime_manage_service: false
        container_runtime_daemon_json_overlay: {overlay}
"""


def merge(tmp_path, overlay, check=False):
    """Run the merge once; return (rc, output, changed count)."""
    path = tmp_path / "docker" / "daemon.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK.format(path=json.dumps(str(path)), validate=json.dumps(VALIDATE),
                                    overlay=json.dumps(overlay)))
    cmd = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(play),
           "-e", "ansible_python_interpreter=" + sys.executable]
    if check:
        cmd += ["--check", "--diff"]
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_INVENTORY="localhost,", ANSIBLE_LOCALHOST_WARNING="false")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, check=False, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    changed = None
    for line in out.splitlines():
        if line.startswith("localhost") and "changed=" in line:
            changed = int(line.split("changed=")[1].split()[0])
    return proc.returncode, out, changed


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


OURS = {
    "default-shm-size": "8G",
    "default-ulimits": {"memlock": {"Name": "memlock", "Hard": -1, "Soft": -1},
                        "stack": {"Name": "stack", "Hard": 67108864, "Soft": 67108864}},
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m", "max-file": "3"},
    "live-restore": True,
}

FOREIGN = {
    "registry-mirrors": ["https://mirror.example.internal"],
    "insecure-registries": ["10.0.0.5:5000"],
    "data-root": "/srv/docker",
    "max-concurrent-downloads": 6,
    "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 65536, "Soft": 65536}},
    "log-opts": {"compress": "true", "max-size": "10m"},
    "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []}},
    "default-runtime": "nvidia",
}


def test_foreign_keys_survive_ours_win_and_second_run_changes_nothing(tmp_path):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    target.write_text(json.dumps(FOREIGN))

    rc, out, changed = merge(tmp_path, OURS)
    assert rc == 0, out
    assert changed == 1, out
    merged = json.loads(target.read_text())
    for key in ("registry-mirrors", "insecure-registries", "data-root", "max-concurrent-downloads",
                "runtimes", "default-runtime"):
        assert merged[key] == FOREIGN[key], key
    assert merged["default-ulimits"] == {**FOREIGN["default-ulimits"], **OURS["default-ulimits"]}
    assert merged["log-opts"] == {"compress": "true", "max-size": "100m", "max-file": "3"}
    assert merged["default-shm-size"] == "8G"
    assert merged["live-restore"] is True
    assert oct(target.stat().st_mode & 0o777) == "0o644"

    before = sha(target)
    rc, out, changed = merge(tmp_path, OURS)
    assert rc == 0, out
    assert changed == 0, out
    assert sha(target) == before


def test_missing_file_is_created_with_our_keys(tmp_path):
    rc, out, changed = merge(tmp_path, OURS)
    assert rc == 0, out
    assert json.loads((tmp_path / "docker" / "daemon.json").read_text()) == OURS


def test_same_content_in_other_formatting_is_left_alone(tmp_path):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    text = json.dumps({**FOREIGN, **OURS}, separators=(",", ":"))  # one line, keys in another order
    target.write_text(text)
    rc, out, changed = merge(tmp_path, OURS)
    assert rc == 0, out
    assert changed == 0, out
    assert target.read_text() == text


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    target.write_text(json.dumps({"data-root": "/srv/docker"}))
    before = sha(target)
    rc, out, changed = merge(tmp_path, OURS, check=True)
    assert rc == 0, out
    assert changed == 1, out
    assert '+  "default-shm-size": "8G"' in out
    assert sha(target) == before


@pytest.mark.parametrize("content,reason", [
    ('{"registry-mirrors": ["https://mirror.example.internal"],', "is not valid JSON"),
    ('["not", "an", "object"]', "is not an object"),
])
def test_unusable_file_stops_the_role_and_stays_untouched(tmp_path, content, reason):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    target.write_text(content)
    before = (sha(target), target.stat().st_mtime_ns)
    rc, out, _unused = merge(tmp_path, OURS)
    assert rc != 0, out
    assert str(target) + (" " if reason == "is not valid JSON" else " holds JSON that ") in out
    assert reason in out.replace("\n", " ")
    assert "left untouched" in out.replace("\n", " ")
    assert (sha(target), target.stat().st_mtime_ns) == before


# --- what the merge refuses or warns about (filter gpufleet.cluster.daemon_json_review) -------------------------

TLS = {"tlsverify": True, "tlscacert": "/etc/docker/ca.pem", "tlscert": "/etc/docker/cert.pem",
       "tlskey": "/etc/docker/key.pem"}


@pytest.mark.parametrize("foreign", [
    {"hosts": ["unix:///var/run/docker.sock", "tcp://0.0.0.0:2375"]},
    {"hosts": ["tcp://127.0.0.1:2375"]},
    {"hosts": "TCP://10.0.0.1:2376", "tls": True, "tlscert": "/c", "tlskey": "/k"},
    {"hosts": ["tcp://0.0.0.0:2376"], **dict(TLS, tlsverify=False)},
    {"hosts": ["tcp://0.0.0.0:2376"], **dict(TLS, tlscacert="")},
])
def test_tcp_api_without_tls_client_verification_is_refused_and_the_file_untouched(tmp_path, foreign):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    target.write_text(json.dumps(foreign))
    before = (sha(target), target.stat().st_mtime_ns)
    rc, out, _unused = merge(tmp_path, OURS)
    flat = " ".join(out.split())
    assert rc != 0, out
    assert "gives root on this node to anyone who can reach that port" in flat
    assert "tcp://" in flat.lower()
    assert "Nothing was changed." in flat
    assert (sha(target), target.stat().st_mtime_ns) == before


def test_tcp_api_with_tls_client_verification_is_kept(tmp_path):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    foreign = {"hosts": ["unix:///var/run/docker.sock", "tcp://0.0.0.0:2376"], **TLS}
    target.write_text(json.dumps(foreign))
    rc, out, changed = merge(tmp_path, OURS)
    assert rc == 0, out
    assert changed == 1, out
    merged = json.loads(target.read_text())
    assert merged["hosts"] == foreign["hosts"] and merged["tlsverify"] is True


def test_a_tcp_host_from_the_overlay_is_refused_too(tmp_path):
    rc, out, _unused = merge(tmp_path, dict(OURS, hosts=["tcp://0.0.0.0:2375"]))
    assert rc != 0, out
    assert "Nothing was changed." in " ".join(out.split())
    assert not (tmp_path / "docker" / "daemon.json").exists()


def test_insecure_registries_are_named_in_a_warning_and_kept(tmp_path):
    target = tmp_path / "docker" / "daemon.json"
    target.parent.mkdir()
    target.write_text(json.dumps(FOREIGN))
    rc, out, _unused = merge(tmp_path, OURS)
    flat = " ".join(out.split())
    assert rc == 0, out
    assert "WARNING: localhost: %s lists insecure-registries 10.0.0.5:5000:" % target in flat
    assert json.loads(target.read_text())["insecure-registries"] == ["10.0.0.5:5000"]
    clean = tmp_path / "clean"
    clean.mkdir()
    rc, out, _unused = merge(clean, OURS)
    assert rc == 0, out
    assert "insecure-registries" not in out
