"""gpufleet.cluster.preload's skips decided in place, through real ansible-playbook runs on localhost: a false
condition is evaluated in ansible-playbook itself and no worker is forked for it, and everything a playbook or a
callback can see of the run is what ansible-core's own workers give (`skip_in_place: false`)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Records which process evaluated a condition: its pid and its parent's.
WHERE_FILTER = '''
import os


def evaluated_in(value, path):
    with open(path, "a") as stream:
        stream.write("%d %d\\n" % (os.getpid(), os.getppid()))
    return value


class FilterModule(object):
    def filters(self):
        return {"evaluated_in": evaluated_in}
'''

PLAYBOOK = """- name: Linear
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    nothing: []
  handlers:
    - name: Handler with a false condition
      ansible.builtin.debug:
        msg: handler ran
      when: nothing | length > 0
  tasks:
    - name: False condition, registered
      ansible.builtin.command: echo never
      register: skipped_one
      when: nothing | length > 0

    - name: What the registered skip holds
      ansible.builtin.assert:
        that:
          - skipped_one is skipped
          - skipped_one is not changed
          - skipped_one.false_condition == 'nothing | length > 0'
          - skipped_one.skip_reason == 'Conditional result was False'

    - name: A block whose condition is false
      when: nothing | length > 0
      block:
        - name: Inherits the block's condition
          ansible.builtin.debug:
            msg: never

    - name: Connection variables are there, as in a worker
      ansible.builtin.debug:
        msg: never
      when: ansible_connection != 'local'

    - name: The check mode variable is there too
      ansible.builtin.debug:
        msg: never
      when: ansible_check_mode

    - name: Two conditions, the second false
      ansible.builtin.debug:
        msg: never
      when:
        - nothing | length == 0
        - nothing | length > 0

    - name: True condition
      ansible.builtin.debug:
        msg: ran
      changed_when: true
      notify: Handler with a false condition
      when: nothing | length == 0

    - name: Loop with a false condition
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: [1, 2]
      when: nothing | length > 0

    - name: Include with a false condition
      ansible.builtin.include_tasks: missing-file-never-read.yml
      when: nothing | length > 0

    - name: Hidden result
      ansible.builtin.debug:
        msg: never
      no_log: true
      when: nothing | length > 0

    - name: Undefined variable in a condition
      ansible.builtin.debug:
        msg: never
      when: not_defined_anywhere | length > 0
      register: undefined_one
      ignore_errors: true

    - name: The undefined variable failed the task, as ansible-core fails it
      ansible.builtin.assert:
        that:
          - undefined_one is failed
          - "'not_defined_anywhere' in undefined_one.msg"

- name: Free
  hosts: localhost
  connection: local
  gather_facts: false
  strategy: free
  tasks:
    - name: False condition under the free strategy
      ansible.builtin.debug:
        msg: never
      when: false
"""

WHERE_PLAYBOOK = """- name: Where conditions are evaluated
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: False
      ansible.builtin.debug:
        msg: never
      when: false | evaluated_in(false_log)

    - name: True
      ansible.builtin.debug:
        msg: ran
      when: true | evaluated_in(true_log)
"""


def ansible_playbook(tmp_path, playbook, extra=(), **env):
    (tmp_path / "filter_plugins").mkdir(exist_ok=True)
    (tmp_path / "filter_plugins" / "where.py").write_text(WHERE_FILTER)
    path = tmp_path / "play.yml"
    path.write_text(playbook)
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                   ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                   ANSIBLE_CALLBACK_RESULT_FORMAT="json", **env)
    process = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                                "localhost,", "-e", "ansible_python_interpreter=%s" % sys.executable,
                                str(path)] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, env=environ, stdin=subprocess.DEVNULL)
    stdout, stderr = process.communicate(timeout=180)
    return process.pid, process.returncode, stdout, stderr


def results(stdout):
    """Each task's result on localhost and the run's statistics, without times."""
    report = json.loads(stdout)
    tasks = []
    for play in report["plays"]:
        for task in play["tasks"]:
            result = dict(task["hosts"]["localhost"])
            for key in ("start", "end", "delta", "stdout", "stdout_lines"):
                result.pop(key, None)
            tasks.append((play["play"]["name"], task["task"]["name"], result))
    return tasks, report["stats"]


@pytest.mark.parametrize("mode", [[], ["--check", "--diff"]], ids=["run", "check"])
def test_a_run_with_skips_in_place_gives_what_ansible_core_gives(tmp_path, mode):
    _pid, code_on, out_on, err_on = ansible_playbook(tmp_path, PLAYBOOK, mode)
    _pid, code_off, out_off, err_off = ansible_playbook(tmp_path, PLAYBOOK, mode, GPUFLEET_SKIP_IN_PLACE="false")
    assert code_off == 0, out_off[-3000:] + err_off[-3000:]
    assert code_on == 0, out_on[-3000:] + err_on[-3000:]
    tasks_on, stats_on = results(out_on)
    tasks_off, stats_off = results(out_off)
    assert tasks_on == tasks_off
    assert stats_on == stats_off
    skipped = {name: result for _play, name, result in tasks_on if result.get("skipped")}
    assert set(skipped) >= {"False condition, registered", "Inherits the block's condition",
                            "Connection variables are there, as in a worker",
                            "Two conditions, the second false", "Loop with a false condition",
                            "Hidden result", "False condition under the free strategy", "Handler with a false condition"}
    # The check mode variable's task is skipped in a real run only.
    assert ("The check mode variable is there too" in skipped) == (not mode)
    assert skipped["Two conditions, the second false"]["false_condition"] == "nothing | length > 0"
    assert skipped["Hidden result"]["censored"].startswith("the output has been hidden")
    assert stats_on["localhost"]["skipped"] == len(skipped)


def test_a_false_condition_is_evaluated_in_ansible_playbook_and_forks_no_worker(tmp_path):
    logs = {which: tmp_path / ("%s.log" % which) for which in ("false", "true")}
    extra = ["-e", "false_log=%s true_log=%s" % (logs["false"], logs["true"])]
    pid, code, stdout, stderr = ansible_playbook(tmp_path, WHERE_PLAYBOOK, extra)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    assert logs["false"].read_text().split() == [str(pid), str(os.getpid())]  # ansible-playbook itself, once
    # A true condition is evaluated there first, then by the worker that runs the task (a child of ansible-playbook).
    lines = [line.split() for line in logs["true"].read_text().splitlines()]
    assert lines[0] == [str(pid), str(os.getpid())]
    assert len(lines) == 2 and lines[1][1] == str(pid) and lines[1][0] != str(pid)


def test_skip_in_place_false_leaves_every_condition_to_a_worker(tmp_path):
    logs = {which: tmp_path / ("%s.log" % which) for which in ("false", "true")}
    extra = ["-e", "false_log=%s true_log=%s" % (logs["false"], logs["true"])]
    pid, code, stdout, stderr = ansible_playbook(tmp_path, WHERE_PLAYBOOK, extra, GPUFLEET_SKIP_IN_PLACE="false")
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    for log in logs.values():
        worker, parent = log.read_text().split()
        assert parent == str(pid) and worker != str(pid)
