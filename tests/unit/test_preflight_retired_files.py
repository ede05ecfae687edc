"""preflight removes the module interpreter of earlier versions: its list covers every path those versions made on a
node, it goes in one managed_files call after the OS check, that call empties a node laid out as they left it and
changes nothing the next time, and no role sets a module interpreter of its own any more."""
import os

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.modules import managed_files
from conftest import ROOT
from module_harness import patch_exits, run_main

PREFLIGHT = os.path.join(ROOT, "roles", "preflight")

# What preflight_module_cache made on a node (the removed roles/preflight/vars/main.yml and
# files/gpufleet-python3.py), as (path, type, mode), parents before what they hold. The interpreter kept one cache
# folder per user under the cache root; preflight made root's.
EARLIER_LAYOUT = [
    ("/usr/local/libexec", "directory", 0o755),
    ("/usr/local/libexec/gpufleet", "directory", 0o755),
    ("/usr/local/libexec/gpufleet/python3", "file", 0o755),
    ("/etc/tmpfiles.d/gpufleet-ansiballz.conf", "file", 0o644),
    ("/var/cache/gpufleet-ansiballz", "directory", 0o755),
    ("/var/cache/gpufleet-ansiballz/0", "directory", 0o700),
    ("/var/cache/gpufleet-ansiballz/0/" + "ab" * 32, "file", 0o600),
]
# Made only when a node lacked it (Debian's base-files does not ship it): a folder of the operating system's
# layout that other software uses too, so it stays.
KEPT = {"/usr/local/libexec"}


def load(*parts):
    with open(os.path.join(PREFLIGHT, *parts)) as handle:
        return yaml.safe_load(handle)


def retired_items():
    return load("vars", "main.yml")["__preflight_retired_files"]


def covered(path, dests):
    return any(path == dest or path.startswith(dest.rstrip("/") + "/") for dest in dests)


def test_every_path_of_earlier_versions_is_removed_but_the_systems_own():
    dests = [item["dest"] for item in retired_items()]
    missing = [path for path, _kind, _mode in EARLIER_LAYOUT if path not in KEPT and not covered(path, dests)]
    assert missing == []
    assert not any(covered(path, dests) for path in KEPT)
    # Nothing else: every item removes something those versions made, and only that.
    assert all(any(path == dest for path, _kind, _mode in EARLIER_LAYOUT) for dest in dests)
    assert all(item == {"dest": item["dest"], "state": "absent"} for item in retired_items())


def test_one_managed_files_call_after_the_os_check_removes_them():
    tasks = load("tasks", "main.yml")
    calls = [index for index, task in enumerate(tasks)
             if "__preflight_retired_files" in str(task.get("gpufleet.cluster.managed_files", ""))]
    assert len(calls) == 1
    os_check = [index for index, task in enumerate(tasks) if "gpufleet_node.os_supported" in str(task)]
    assert os_check and os_check[0] < calls[0]
    # Only where the detection found one of them: a node without them makes no round trip for the removal.
    assert tasks[calls[0]]["when"] == ["preflight_root == '/'", "__preflight_node.present | length > 0"]
    detect = [task for task in tasks if "gpufleet.cluster.node_facts" in task]
    assert len(detect) == 1 and detect[0]["register"] == "__preflight_node"
    assert detect[0]["gpufleet.cluster.node_facts"]["present"] == "{{ __preflight_retired_files | map(attribute='dest') }}"
    assert tasks.index(detect[0]) < calls[0]


def test_no_role_or_playbook_sets_a_module_interpreter():
    """Modules run on the Python the inventory or Ansible's discovery gives; the collection never replaces it."""
    paths = [os.path.join(ROOT, "site.yml")]
    for top in ("roles", "playbooks"):
        for folder, _dirs, names in os.walk(os.path.join(ROOT, top)):
            paths.extend(os.path.join(folder, name) for name in names)
    found = []
    for path in paths:
        with open(path, errors="replace") as handle:
            if "ansible_python_interpreter:" in handle.read():
                found.append(os.path.relpath(path, ROOT))
    assert found == []


def plant(root):
    for path, kind, mode in EARLIER_LAYOUT:
        target = root + path
        if kind == "directory":
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as handle:
                handle.write("# left by an earlier version\n")
        os.chmod(target, mode)


def remove(root, check=False):
    items = [dict(item, dest=root + item["dest"]) for item in retired_items()]
    return run_main(managed_files.main, {"files": items, "_ansible_check_mode": check})


@pytest.fixture
def node(tmp_path, monkeypatch):
    patch_exits(monkeypatch)
    return str(tmp_path)


def present(root):
    return [path for path, _kind, _mode in EARLIER_LAYOUT if os.path.lexists(root + path)]


def test_the_call_empties_a_node_of_earlier_versions_and_changes_nothing_after(node):
    plant(node)
    checked = remove(node, check=True)
    assert checked["changed"] is True
    assert present(node) == [path for path, _kind, _mode in EARLIER_LAYOUT]
    removed = remove(node)
    assert removed["changed"] is True
    assert present(node) == sorted(KEPT)
    again = remove(node)
    assert again["changed"] is False


def test_a_node_that_never_had_them_is_not_changed(node):
    assert remove(node)["changed"] is False
    assert remove(node, check=True)["changed"] is False
    assert present(node) == []
