"""The conventions of docs/development.md ("One way to do each common thing") that a file scan can check."""
import os
import re

import yaml

from conftest import ROOT

ROLES = os.path.join(ROOT, "roles")
ROLE_NAMES = sorted(os.listdir(ROLES))


def role_files(*suffixes):
    for role in ROLE_NAMES:
        for folder, _dirs, names in os.walk(os.path.join(ROLES, role)):
            for name in names:
                if name.endswith(suffixes):
                    yield role, os.path.join(folder, name)


def tasks_of(data):
    for task in data if isinstance(data, list) else []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from tasks_of(task.get(key))


def role_tasks():
    """(role, path, task) for every task of every role's tasks/ files, blocks included."""
    for role, path in role_files(".yml"):
        if os.sep + "tasks" + os.sep not in path:
            continue
        with open(path) as handle:
            data = yaml.safe_load(handle) or []
        for task in tasks_of(data):
            yield role, path, task


def test_internal_names_carry_the_one_marker():
    """`__<role>_<name>`, never `<role>__<name>` nor a trailing underscore."""
    old_marker = re.compile(r"\b(%s)__[a-z0-9_]+" % "|".join(ROLE_NAMES))
    trailing = re.compile(r"\b(?:%s)_[a-z0-9_]*[a-z0-9]_\b(?![*'\"])" % "|".join(ROLE_NAMES))
    offenders = []
    for _role, path in role_files(".yml", ".j2"):
        with open(path) as handle:
            text = handle.read()
        for pattern in (old_marker, trailing):
            offenders += ["%s: %s" % (os.path.relpath(path, ROOT), m.group(0)) for m in pattern.finditer(text)]
    assert offenders == []


def test_task_files_are_snake_case():
    for role in ROLE_NAMES:
        tasks_dir = os.path.join(ROLES, role, "tasks")
        for name in os.listdir(tasks_dir) if os.path.isdir(tasks_dir) else []:
            assert re.match(r"^[a-z0-9_]+\.yml$", name), "%s/tasks/%s" % (role, name)


def test_package_tasks_retry_through_the_one_knob():
    """Every apt/package/dnf task that retries takes gpufleet_package_retries and gpufleet_package_retry_delay."""
    seen = 0
    with open(os.path.join(ROOT, "playbooks", "audit.yml")) as handle:
        audit = [("playbooks/audit.yml", task) for play in yaml.safe_load(handle) for task in play.get("tasks", [])]
    tasks = [(os.path.relpath(path, ROOT), task) for _role, path, task in role_tasks()] + audit
    for where, task in tasks:
        if "retries" not in task:
            continue
        if not any(key in task for key in ("ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf")):
            continue
        seen += 1
        where = "%s: %s" % (where, task.get("name"))
        # The default lives once, in roles/gpufleet_defaults (a dependency of every role, and of audit.yml's play).
        assert task["retries"] == "{{ gpufleet_package_retries }}", where
        assert task["delay"] == "{{ gpufleet_package_retry_delay }}", where
        assert task["until"].endswith("is succeeded"), where
    assert seen >= 15


def test_a_templated_task_file_name_goes_under_file():
    """`include_tasks: "install_{{ 'apt' if family == 'Debian' else 'dnf' }}.yml"` in the free form is read as
    key=value options ("Invalid options for ansible.builtin.include_tasks") when the task runs, after the syntax
    check passed: a name with an `=` in it goes under `file:`."""
    for _role, path, task in role_tasks():
        for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
            value = task.get(key)
            if isinstance(value, str):
                assert "=" not in value, "%s: %s: %s" % (os.path.relpath(path, ROOT), task.get("name"), value)


def test_task_vars_are_internal_names():
    """A task's own `vars:` are working values: `__<role>_<name>`. Variables handed to an include or import are the
    included file's or role's inputs and keep their names (validate's step record included)."""
    inputs = set()
    for role in ROLE_NAMES:
        spec = os.path.join(ROLES, role, "meta", "argument_specs.yml")
        if os.path.exists(spec):
            with open(spec) as handle:
                for entry in (yaml.safe_load(handle).get("argument_specs") or {}).values():
                    inputs |= set((entry.get("options") or {}))
    offenders = []
    for role, path, task in role_tasks():
        if any(key.endswith(("include_tasks", "import_tasks", "include_role", "import_role")) for key in task):
            continue
        for name in task.get("vars") or {}:
            if not name.startswith("__%s_" % role) and name not in inputs:
                offenders.append("%s: %s" % (os.path.relpath(path, ROOT), name))
    assert offenders == []


DETECT = {
    "name": "Detect the node when preflight has not run yet",
    "ansible.builtin.include_role": {"name": "gpufleet.cluster.preflight", "apply": {"tags": ["always"]}},
    "when": "gpufleet_node is not defined",
    "tags": ["always"],
}


def test_every_detection_of_the_node_is_the_same_task():
    """A role (or entry point) that needs gpufleet_node detects it with exactly this task, first, so a role run on its
    own, or with a concern's tag, still has the node facts."""
    found = 0
    for _role, path, task in role_tasks():
        if "preflight" in str(task.get("ansible.builtin.include_role", "")):
            assert task == DETECT, os.path.relpath(path, ROOT)
            found += 1
    assert found >= 11


def playbook_role_tags():
    """{role: set of tags} as site.yml and playbooks/*.yml give them to the roles they run."""
    found = {}
    paths = [os.path.join(ROOT, "site.yml")] + [os.path.join(ROOT, "playbooks", name)
                                                for name in sorted(os.listdir(os.path.join(ROOT, "playbooks")))
                                                if name.endswith(".yml")]
    for path in paths:
        with open(path) as handle:
            plays = yaml.safe_load(handle) or []
        for play in plays:
            entries = list(play.get("roles") or [])
            for task in tasks_of(play.get("tasks")):
                for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                    if key in task:
                        entries.append(dict(task[key], tags=task.get("tags", [])))
            for entry in entries:
                name = entry.get("role") or entry.get("name") if isinstance(entry, dict) else entry
                if isinstance(name, str) and name.startswith("gpufleet.cluster."):
                    tags = entry.get("tags") or []
                    found.setdefault(name.split(".")[-1], set()).update([tags] if isinstance(tags, str) else tags)
    return found


def test_every_role_readme_lists_its_tags():
    """A `## Tags` section in each role README that names every tag the playbooks give the role."""
    given = playbook_role_tags()
    problems = []
    for role in ROLE_NAMES:
        with open(os.path.join(ROLES, role, "README.md")) as handle:
            text = handle.read()
        match = re.search(r"^## Tags\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        if not match:
            problems.append("%s: no ## Tags section" % role)
            continue
        missing = sorted(tag for tag in given.get(role, set()) if "`%s`" % tag not in match.group(1))
        if missing:
            problems.append("%s: Tags section does not name %s" % (role, ", ".join(missing)))
    assert given.get("os_hardening") and given.get("gpu_monitoring") >= {"gpu_monitoring", "prometheus"}
    assert not problems, problems


def role_and_playbook_tasks():
    """(where, task) for every task of the roles' tasks/ and handlers/ files and of site.yml and playbooks/*.yml,
    blocks included."""
    for role, path in role_files(".yml"):
        if os.sep + "tasks" + os.sep not in path and os.sep + "handlers" + os.sep not in path:
            continue
        with open(path) as handle:
            for task in tasks_of(yaml.safe_load(handle) or []):
                yield os.path.relpath(path, ROOT), task
    paths = [os.path.join(ROOT, "site.yml")] + [os.path.join(ROOT, "playbooks", name)
                                                for name in sorted(os.listdir(os.path.join(ROOT, "playbooks")))
                                                if name.endswith(".yml")]
    for path in paths:
        with open(path) as handle:
            for play in yaml.safe_load(handle) or []:
                for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                    for task in tasks_of(play.get(key)):
                        yield os.path.relpath(path, ROOT), task


# Builtins kept where the batched modules do not do the job, each for its reason (a comment at the task says it).
BUILTIN_LINE_EDITS = {
    # A block of lines inside the aide.conf the EL package owns: neither a whole file nor key lines.
    ("roles/os_hardening/tasks/tools.yml", "ansible.builtin.blockinfile"),
    # dnf-automatic's options by section: the same option name stands in several sections.
    ("roles/os_hardening/tasks/unattended_upgrades.yml", "community.general.ini_file"),
}


def one_way_problem(where, task):
    """Why a task writes a file, a unit's state, a sysctl or a line another way than the collection's batched modules
    (managed_files, systemd_units, sysctl_settings, line_settings), or None."""
    on_controller = task.get("delegate_to") == "localhost"
    for module in ("ansible.builtin.lineinfile", "ansible.builtin.replace", "ansible.builtin.assemble",
                   "ansible.posix.sysctl", "community.general.pam_limits", "ansible.builtin.service",
                   "ansible.builtin.systemd"):
        if module in task:
            return "%s: use the collection's batched module" % module
    for module in ("ansible.builtin.blockinfile", "community.general.ini_file"):
        if module in task and (where, module) not in BUILTIN_LINE_EDITS:
            return "%s: use gpufleet.cluster.line_settings or managed_files" % module
    for module in ("ansible.builtin.copy", "ansible.builtin.template"):
        if module in task and not on_controller:
            return "%s on a node: use gpufleet.cluster.managed_files" % module
    args = task.get("ansible.builtin.file")
    if args is not None and not on_controller:
        # Left: a link (managed_files writes none) and the attributes of a file whose content is not ours.
        if not isinstance(args, dict) or args.get("state", "file") not in ("link", "file"):
            return "ansible.builtin.file state %s: use gpufleet.cluster.managed_files" % (args.get("state"),)
    args = task.get("ansible.builtin.systemd_service")
    if args is not None:
        # Left: restarts, reloads and re-executions (systemd_units starts, stops, enables, disables and reloads
        # systemd's units, and restarts nothing), and reads.
        state = str(args.get("state", ""))
        wants = set(args) & {"enabled", "masked", "daemon_reload"}
        if state and "restart" not in state and "reload" not in state:
            return "systemd_service state %s: use gpufleet.cluster.systemd_units" % state
        if wants and not state:
            return "systemd_service %s alone: use gpufleet.cluster.systemd_units" % ", ".join(sorted(wants))
        if "enabled" in wants or "masked" in wants:
            return "systemd_service enabled/masked: use gpufleet.cluster.systemd_units"
    return None


def test_one_way_per_kind_of_change():
    """Files, directories and removals through managed_files, units' states and daemon-reloads through systemd_units,
    sysctl through sysctl_settings, key lines through line_settings: the builtins only where those do not do the job
    (a restart or reload, a link, a file's attributes alone, a URL or an archive, a block or an ini section on EL)
    and for the reports the controller keeps."""
    problems, seen = [], 0
    for where, task in role_and_playbook_tasks():
        seen += 1
        problem = one_way_problem(where, task)
        if problem:
            problems.append("%s: %s: %s" % (where, task.get("name"), problem))
    assert seen > 500
    assert problems == []


def test_one_way_check_catches_the_other_ways():
    node_copy = {"name": "x", "ansible.builtin.copy": {"content": "a", "dest": "/etc/a"}}
    assert one_way_problem("roles/r/tasks/x.yml", node_copy)
    assert one_way_problem("roles/r/tasks/x.yml", dict(node_copy, delegate_to="localhost")) is None
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.file": {"path": "/d", "state": "directory"}})
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.file": {"path": "/d", "state": "absent"}})
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.file": {"path": "/b", "mode": "0750"}}) is None
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.systemd_service": {"name": "a", "state": "started"}})
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.systemd_service": {"daemon_reload": True}})
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.systemd_service": {"name": "a", "enabled": False}})
    assert one_way_problem("roles/r/handlers/main.yml",
                           {"ansible.builtin.systemd_service": {"name": "a", "state": "restarted",
                                                                "daemon_reload": True}}) is None
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.systemd_service": {"name": "a"}}) is None
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.lineinfile": {"path": "/a", "line": "b"}})
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.posix.sysctl": {"name": "a", "value": "1"}})
    assert one_way_problem("roles/r/tasks/x.yml", {"ansible.builtin.blockinfile": {"path": "/a", "block": "b"}})
