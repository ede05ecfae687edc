"""gpufleet.cluster.preload: every filter, lookup and action file of the collection is in Ansible's plugin cache
before the first worker forks, and a worker then templates a collection filter without loading anything; at each
play's start the heap is collected and frozen, so that forked workers leave it alone.

Each check runs in a child Python (a fresh plugin loader), as ansible-playbook's own process would.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import json, sys
from ansible.plugins.loader import MODULE_CACHE, init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible_collections.gpufleet.cluster.plugins.callback import preload
before = sorted(path for cache in MODULE_CACHE.values() for path in cache if "gpufleet" in path)
loaded = preload.preload()
after = sorted(path.split("/plugins/")[-1] for cache in MODULE_CACHE.values() for path in cache if "gpufleet" in path)
print(json.dumps({"before": before, "loaded": loaded, "after": after}))
"""


def run_child():
    done = subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "collections")], capture_output=True,
                          text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def plugin_files(kind):
    return sorted("%s/%s" % (kind, name) for name in os.listdir(os.path.join(ROOT, "plugins", kind))
                  if name.endswith(".py") and name != "__init__.py")


def test_every_filter_lookup_and_action_file_is_loaded_once():
    result = run_child()
    assert result["before"] == []
    wanted = plugin_files("filter") + plugin_files("lookup") + plugin_files("action")
    assert sorted(result["after"]) == sorted(wanted)
    assert sorted("%s.py" % name for name in result["loaded"]) == sorted(wanted)


def test_the_project_and_molecule_enable_it():
    with open(os.path.join(ROOT, "ansible.cfg")) as handle:
        assert "callbacks_enabled = gpufleet.cluster.preload\n" in handle.read()
    with open(os.path.join(ROOT, ".config", "molecule", "config.yml")) as handle:
        assert "callbacks_enabled: gpufleet.cluster.preload\n" in handle.read()


def test_a_failing_preload_warns_and_the_run_goes_on(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.callback import preload

    def broken():
        raise RuntimeError("no filter directory")

    class Display(object):
        def __init__(self):
            self.warnings = []

        def warning(self, msg):
            self.warnings.append(msg)

    monkeypatch.setattr(preload, "preload", broken)
    monkeypatch.setattr(preload.CallbackBase, "__init__", lambda self, *args, **kwargs: None)
    callback = preload.CallbackModule.__new__(preload.CallbackModule)
    callback._display = Display()
    callback.__init__()
    assert len(callback._display.warnings) == 1 and "no filter directory" in callback._display.warnings[0]


FREEZE_CHILD = r"""
import gc, json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible_collections.gpufleet.cluster.plugins.callback import preload

class Cycle(object):
    pass

def cycle():
    node = Cycle()
    node.me = node
    return node

gc.disable()  # only freeze_heap collects, so what it does is what is counted
first = cycle()
del first
frozen_first = preload.freeze_heap()
collected_first = not any(type(obj) is Cycle for obj in gc.get_objects())
kept = cycle()
frozen_again = preload.freeze_heap()
kept_frozen = gc.get_freeze_count() > 0 and not any(type(obj) is Cycle for obj in gc.get_objects())
del kept
frozen_third = preload.freeze_heap()
collected_later = gc.get_freeze_count() > 0 and frozen_third < frozen_again
print(json.dumps({"frozen": frozen_first, "collected_first": collected_first, "kept_frozen": kept_frozen,
                  "collected_later": collected_later}))
"""


def test_freeze_heap_collects_then_freezes_and_frees_what_an_earlier_play_froze():
    done = subprocess.run([sys.executable, "-c", FREEZE_CHILD, os.path.join(ROOT, "collections")],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["frozen"] > 1000  # ansible's own modules are on the heap
    # A cycle that was garbage before the play is collected, not frozen.
    assert result["collected_first"]
    # A live object is frozen (left out of the collections a forked worker runs) ...
    assert result["kept_frozen"]
    # ... and once it is garbage, the next play's unfreeze and collection free it: frozen objects do not pile up.
    assert result["collected_later"]


def test_each_play_start_freezes_the_heap(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.callback import preload

    calls = []
    monkeypatch.setattr(preload, "freeze_heap", lambda: calls.append("freeze"))
    callback = preload.CallbackModule.__new__(preload.CallbackModule)
    callback.v2_playbook_on_play_start(object())
    callback.v2_playbook_on_play_start(object())
    assert calls == ["freeze", "freeze"]


def test_role_paths_are_resolved_once_and_resolve_as_ansible_core_does(tmp_path, monkeypatch):
    from ansible.playbook.role import Role
    from ansible_collections.gpufleet.cluster.plugins.callback import preload

    original = Role.__dict__["get_role_path"]
    real = tmp_path / "roles" / "real"
    real.mkdir(parents=True)
    (tmp_path / "linked").symlink_to(real)
    role = Role.__new__(Role)
    role._role_path = str(tmp_path / "linked")
    expected = original(role)
    assert expected == str(real)
    try:
        memo = preload.remember_role_paths()
        assert preload.remember_role_paths() is memo  # once per process
        assert role.get_role_path() == expected
        calls = []
        monkeypatch.setattr(os.path, "realpath", lambda path: calls.append(path) or path)
        assert role.get_role_path() == expected and calls == []  # remembered, not resolved again
    finally:
        Role.get_role_path = original


def test_tasks_in_place_wrap_the_strategies_once_and_only_on_the_ansible_core_they_know(monkeypatch):
    from ansible import release
    from ansible.plugins.strategy import StrategyBase
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import in_place

    original = StrategyBase.__dict__["_queue_task"]
    try:
        assert in_place.install(skip=False, run=False) is None  # both off: nothing to wrap
        assert StrategyBase.__dict__["_queue_task"] is original
        wrapper = in_place.install()
        assert wrapper is not None and wrapper.gpufleet_original is original
        assert in_place.install() is wrapper  # installed once per process, never wrapped twice
        StrategyBase._queue_task = original
        monkeypatch.setattr(release, "__version__", "2.20.0")
        assert in_place.install() is None
        assert StrategyBase.__dict__["_queue_task"] is original
    finally:
        StrategyBase._queue_task = original


def task(**fields):
    """The attributes of ansible-core's Task that decide what can be done in place (with_items sets loop_with)."""
    from types import SimpleNamespace

    return SimpleNamespace(**dict({"when": [], "loop": None, "loop_with": None, "delegate_to": None, "until": [],
                                   "async_val": 0, "timeout": 0, "resolved_action": "ansible.builtin.set_fact"},
                                  **fields))


def test_only_a_task_with_a_condition_no_loop_and_no_delegation_is_judged_in_place():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import in_place

    assert in_place.judgeable(task(when=["x"]))
    assert in_place.judgeable(task(when=["x"], resolved_action="ansible.builtin.command"))
    assert not in_place.judgeable(task())
    assert not in_place.judgeable(task(when=["x"], loop=[1]))
    assert not in_place.judgeable(task(when=["x"], loop_with="items"))
    assert not in_place.judgeable(task(when=["x"], delegate_to="other"))


def test_only_a_controller_action_run_once_without_retries_async_or_timeout_runs_in_place():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import in_place

    for action in ("assert", "debug", "fail", "include_vars", "set_fact", "validate_argument_spec"):
        assert in_place.runnable(task(resolved_action="ansible.builtin." + action))
    assert in_place.runnable(task(when=["x"]))
    for action in ("ansible.builtin.command", "ansible.builtin.pause", "ansible.builtin.add_host",
                   "ansible.builtin.include_tasks", "ansible.builtin.wait_for", "gpufleet.cluster.managed_files"):
        assert not in_place.runnable(task(resolved_action=action))
    assert not in_place.runnable(task(loop=[1]))
    assert not in_place.runnable(task(loop_with="items"))
    assert not in_place.runnable(task(delegate_to="other"))
    assert not in_place.runnable(task(until=["x is succeeded"]))
    assert not in_place.runnable(task(async_val=10))
    assert not in_place.runnable(task(timeout=5))
