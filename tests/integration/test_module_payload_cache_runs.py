"""gpufleet.cluster.preload's module payload cache through real ansible-playbook runs on localhost.

A probe collection (made per test) has a module that returns a message from one of its module_utils. The first run
builds and stores its payload, the second takes it from the cache instead of building it; a module_utils file
changed between runs, or a copy of the collection that now comes first on the collection path, is never served
from the cache; a stored entry another user could have written is not used; `module_payload_cache: false` stores
nothing.
"""
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleettest.probe.plugins.module_utils.message import MESSAGE


def main():
    AnsibleModule(argument_spec={}).exit_json(changed=False, message=MESSAGE)


if __name__ == "__main__":
    main()
'''

PLAYBOOK = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the probe module
      gpufleettest.probe.probe:
      register: probe
    - name: Say what it returned
      ansible.builtin.debug:
        msg: "probe says {{ probe.message }}"
"""


def make_collection(base, message):
    root = os.path.join(str(base), "ansible_collections", "gpufleettest", "probe")
    for folder in ("plugins/modules", "plugins/module_utils", "meta"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
    with open(os.path.join(root, "galaxy.yml"), "w") as handle:
        handle.write("namespace: gpufleettest\nname: probe\nversion: 1.0.0\nreadme: README.md\nauthors: [test]\n")
    with open(os.path.join(root, "meta", "runtime.yml"), "w") as handle:
        handle.write("requires_ansible: '>=2.15'\n")
    with open(os.path.join(root, "plugins", "modules", "probe.py"), "w") as handle:
        handle.write(MODULE)
    set_message(base, message)


def set_message(base, message):
    path = os.path.join(str(base), "ansible_collections", "gpufleettest", "probe", "plugins", "module_utils",
                        "message.py")
    with open(path, "w") as handle:
        handle.write("MESSAGE = %r\n" % message)


def run(tmp_path, collection_paths, **env):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    paths = ":".join([str(path) for path in collection_paths] + [os.path.join(ROOT, "collections")])
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=paths,
                   ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), GPUFLEET_MODULE_PAYLOAD_CACHE_DIR=str(tmp_path / "cache"),
                   GPUFLEET_TEMPLATE_CACHE="false", **env)
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          capture_output=True, text=True, cwd=str(tmp_path), env=environ, stdin=subprocess.DEVNULL,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line.split("probe says ", 1)[1].rstrip('"') for line in done.stdout.splitlines() if "probe says " in line]
    assert len(said) == 1, done.stdout
    return said[0]


def entries(tmp_path):
    """{entry file: inode}: a payload stored again is a new file (written to a temporary name, renamed)."""
    return {path: os.stat(path).st_ino for path in glob.glob(str(tmp_path / "cache" / "*" / "*"))}


def test_the_second_run_takes_the_payloads_the_first_stored(tmp_path):
    make_collection(tmp_path / "b", "one")
    assert run(tmp_path, [tmp_path / "b"]) == "one"
    first = entries(tmp_path)
    assert len(first) == 1  # the probe module (debug runs no module)
    for path in first:
        assert os.stat(path).st_mode & 0o777 == 0o600
    assert run(tmp_path, [tmp_path / "b"]) == "one"
    assert entries(tmp_path) == first  # nothing was built and stored again


def test_a_changed_module_utils_file_is_never_served_stale(tmp_path):
    make_collection(tmp_path / "b", "one")
    assert run(tmp_path, [tmp_path / "b"]) == "one"
    set_message(tmp_path / "b", "two")
    assert run(tmp_path, [tmp_path / "b"]) == "two"
    assert run(tmp_path, [tmp_path / "b"]) == "two"


def test_a_copy_that_now_comes_first_on_the_collection_path_wins(tmp_path):
    (tmp_path / "a" / "ansible_collections").mkdir(parents=True)  # on the path, and there, from the start
    make_collection(tmp_path / "b", "one")
    assert run(tmp_path, [tmp_path / "a", tmp_path / "b"]) == "one"
    make_collection(tmp_path / "a", "shadow")  # same paths configured, a new copy appears in the first one
    assert run(tmp_path, [tmp_path / "a", tmp_path / "b"]) == "shadow"


def test_an_entry_others_could_write_is_not_used(tmp_path):
    make_collection(tmp_path / "b", "one")
    assert run(tmp_path, [tmp_path / "b"]) == "one"
    planted = entries(tmp_path)
    for path in planted:
        os.chmod(path, 0o666)
    assert run(tmp_path, [tmp_path / "b"]) == "one"
    after = entries(tmp_path)
    assert set(after) == set(planted)
    assert all(after[path] != planted[path] for path in planted)  # built again and stored as private files
    assert all(os.stat(path).st_mode & 0o777 == 0o600 for path in after)


def test_module_payload_cache_false_stores_nothing(tmp_path):
    make_collection(tmp_path / "b", "one")
    assert run(tmp_path, [tmp_path / "b"], GPUFLEET_MODULE_PAYLOAD_CACHE="false") == "one"
    assert entries(tmp_path) == {}
