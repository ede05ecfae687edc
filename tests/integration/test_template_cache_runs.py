"""gpufleet.cluster.preload's template cache through a real ansible-playbook run on localhost: the first run fills
the cache, the second compiles nothing anew, and `template_cache: false` leaves it off."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLAYBOOK = """- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    names: [a, b]
  tasks:
    - name: Template through the cache
      ansible.builtin.debug:
        msg: "{{ names | map('upper') | join(',') }}"
      when: names | length == 2
"""


def run_playbook(tmp_path, **env):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                   ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), **env)
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           str(playbook)], capture_output=True, text=True, cwd=ROOT, env=environ,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert '"msg": "A,B"' in done.stdout
    return done


def cache_entries(root):
    return sorted(name for folder in (root.iterdir() if root.exists() else []) for name in os.listdir(str(folder)))


def test_a_run_fills_the_template_cache_and_the_next_run_reuses_it(tmp_path):
    root = tmp_path / "templates"
    run_playbook(tmp_path, GPUFLEET_TEMPLATE_CACHE_DIR=str(root))
    first = cache_entries(root)
    assert len(first) >= 2  # the message and the condition at least
    stamps = {name: os.stat(str(path)).st_mtime_ns for name, path in
              ((path.name, path) for path in root.glob("*/*"))}
    run_playbook(tmp_path, GPUFLEET_TEMPLATE_CACHE_DIR=str(root))
    assert cache_entries(root) == first  # nothing compiled anew
    assert {path.name: os.stat(str(path)).st_mtime_ns for path in root.glob("*/*")} == stamps  # nor rewritten


def test_template_cache_false_leaves_it_off(tmp_path):
    root = tmp_path / "templates"
    run_playbook(tmp_path, GPUFLEET_TEMPLATE_CACHE_DIR=str(root), GPUFLEET_TEMPLATE_CACHE="false")
    assert not root.exists()
