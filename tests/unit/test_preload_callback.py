"""gpufleet.cluster.preload: every filter, lookup and action file of the collection is in Ansible's plugin cache
before the first worker forks, and a worker then templates a collection filter without loading anything.

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
