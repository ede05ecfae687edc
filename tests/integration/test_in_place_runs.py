"""gpufleet.cluster.preload's tasks in place, through real ansible-playbook runs on localhost: a false condition is
evaluated, and a controller-only action (set_fact, assert, debug...) is run, in ansible-playbook itself with no worker
forked, and everything a playbook or a callback can see of the run is what ansible-core's own workers give
(`skip_in_place: false`, `run_in_place: false`)."""
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

    - name: Handler with a true condition
      ansible.builtin.set_fact:
        handled: true
      when: nothing | length == 0
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

    - name: A fact
      ansible.builtin.set_fact:
        one_fact: "{{ nothing + [1] }}"
      register: fact_result

    - name: Variables from a file
      ansible.builtin.include_vars:
        file: "{{ playbook_dir }}/vars.yml"

    - name: What the fact, its registered result and the file gave
      ansible.builtin.assert:
        that:
          - one_fact == [1]
          - fact_result.ansible_facts.one_fact == [1]
          - from_file == 'yes'

    - name: A failing assertion
      ansible.builtin.assert:
        that: nothing | length > 0
        fail_msg: nothing is empty
      ignore_errors: true

    - name: A failure asked for
      ansible.builtin.fail:
        msg: asked
      register: failed_one
      ignore_errors: true

    - name: The arguments of a role entry point
      ansible.builtin.validate_argument_spec:
        argument_spec:
          one_fact:
            type: list
            elements: int
            required: true

    - name: A variable shown
      ansible.builtin.debug:
        var: one_fact

    - name: A hidden message
      ansible.builtin.debug:
        msg: secret
      no_log: true

    - name: A fact with retries (a worker's)
      ansible.builtin.set_fact:
        retried: true
      register: retried_result
      until: retried_result is succeeded
      retries: 2
      delay: 0

    - name: Facts in a loop (a worker's)
      ansible.builtin.set_fact:
        looped: "{{ item }}"
      loop: [1, 2]

    - name: A notifying message
      ansible.builtin.debug:
        msg: notify
      changed_when: true
      notify: Handler with a true condition

    - name: An undefined variable in a message
      ansible.builtin.debug:
        msg: "{{ not_defined_anywhere }}"
      register: undefined_message
      ignore_errors: true

    - name: Everything above as ansible-core gives it
      ansible.builtin.assert:
        that:
          - failed_one is failed and failed_one.msg == 'asked'
          - retried and looped == 2
          - undefined_message is failed
          - "'not_defined_anywhere' in undefined_message.msg"

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

WHERE_PLAYBOOK = """- name: Where conditions are evaluated and actions run
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: False
      ansible.builtin.ping:
      when: false | evaluated_in(false_log)

    - name: True, for a module
      ansible.builtin.ping:
      when: true | evaluated_in(true_log)

    - name: A controller-only action
      ansible.builtin.set_fact:
        ran: "{{ true | evaluated_in(run_log) }}"

    - name: A controller-only action with retries
      ansible.builtin.set_fact:
        retried: "{{ true | evaluated_in(retry_log) }}"
      register: retried_result
      until: retried_result is succeeded
      retries: 1
      delay: 0
"""
LOGS = ("false", "true", "run", "retry")


def ansible_playbook(tmp_path, playbook, extra=(), **env):
    (tmp_path / "filter_plugins").mkdir(exist_ok=True)
    (tmp_path / "filter_plugins" / "where.py").write_text(WHERE_FILTER)
    path = tmp_path / "play.yml"
    path.write_text(playbook)
    (tmp_path / "vars.yml").write_text("from_file: 'yes'\n")
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
def test_a_run_with_tasks_in_place_gives_what_ansible_core_gives(tmp_path, mode):
    _pid, code_on, out_on, err_on = ansible_playbook(tmp_path, PLAYBOOK, mode)
    _pid, code_off, out_off, err_off = ansible_playbook(tmp_path, PLAYBOOK, mode, GPUFLEET_SKIP_IN_PLACE="false",
                                                        GPUFLEET_RUN_IN_PLACE="false")
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
    ran = {name: result for _play, name, result in tasks_on}
    assert ran["A variable shown"]["one_fact"] == [1]
    assert ran["A hidden message"]["censored"].startswith("the output has been hidden")
    assert ran["A failing assertion"]["failed"] and ran["A failing assertion"]["msg"] == "nothing is empty"
    assert ran["Handler with a true condition"]["ansible_facts"] == {"handled": True}
    assert stats_on["localhost"]["ignored"] == 4


def where(tmp_path, **env):
    """(ansible-playbook's pid, {log: [(pid, parent pid) per evaluation]}) of a run of WHERE_PLAYBOOK."""
    logs = {name: tmp_path / ("%s.log" % name) for name in LOGS}
    for path in logs.values():
        if path.exists():
            path.unlink()
    extra = ["-e", " ".join("%s_log=%s" % (name, path) for name, path in logs.items())]
    pid, code, stdout, stderr = ansible_playbook(tmp_path, WHERE_PLAYBOOK, extra, **env)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    return str(pid), {name: [tuple(line.split()) for line in path.read_text().splitlines()]
                      for name, path in logs.items()}


def test_a_false_condition_and_a_controller_action_stay_in_ansible_playbook(tmp_path):
    pid, logs = where(tmp_path)
    here = (pid, str(os.getpid()))  # ansible-playbook itself, a child of this test
    assert logs["false"] == [here]
    assert logs["run"] == [here]
    # A module's true condition is evaluated there first, then by the worker that runs the task (a child of
    # ansible-playbook); a task with retries is a worker's.
    assert logs["true"][0] == here and len(logs["true"]) == 2 and logs["true"][1][1] == pid
    assert len(logs["retry"]) == 1 and logs["retry"][0][1] == pid


def test_in_place_off_leaves_every_task_to_a_worker(tmp_path):
    pid, logs = where(tmp_path, GPUFLEET_SKIP_IN_PLACE="false", GPUFLEET_RUN_IN_PLACE="false")
    for name in LOGS:
        assert len(logs[name]) == 1 and logs[name][0][1] == pid and logs[name][0][0] != pid, name


def test_each_switch_alone(tmp_path):
    pid, logs = where(tmp_path, GPUFLEET_RUN_IN_PLACE="false")
    assert logs["false"] == [(pid, str(os.getpid()))] and logs["run"][0][1] == pid
    pid, logs = where(tmp_path, GPUFLEET_SKIP_IN_PLACE="false")
    assert logs["false"][0][1] == pid and logs["run"] == [(pid, str(os.getpid()))]
