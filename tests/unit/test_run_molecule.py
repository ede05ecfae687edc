"""scripts/run_molecule.py: what a failed scenario's summary shows at the end of the log."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("run_molecule", os.path.join(ROOT, "scripts", "run_molecule.py"))
run_molecule = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run_molecule)

# Shapes as Ansible's yaml result format and molecule 25 write them (callback_result_format: yaml).
LOG = """\
TASK [Wait for instance(s) deletion to complete] *******************************
FAILED - RETRYING: [localhost]: Wait for instance(s) deletion to complete (300 retries left).
changed: [localhost] => (item=gpufleet-cluster-node1)

TASK [Probe a port that may be closed] *****************************************
fatal: [node1]: FAILED! => changed=false
  elapsed: 1
  msg: Timeout when waiting for 127.0.0.1:9
...ignoring

TASK [Destroy molecule instance(s)] ********************************************
failed: [localhost] (item=gpufleet-cluster-node2) => changed=false
  ansible_loop_var: item
  line 3
  msg: 'An unexpected requests error occurred when trying to talk to the Docker daemon: Read timed out.'
  line 4
  line 5
  line 6
  line 7
  line 8
  line 9

PLAY RECAP *********************************************************************
localhost                  : ok=1    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0

CRITICAL Idempotence test failed because of the following tasks:
*  [node1] => gpufleet.cluster.interconnect : Write the hostfile
*  [node2] => gpufleet.cluster.interconnect : Write the hostfile
INFO     [cluster > destroy] Executing
"""


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "cluster.log"
    path.write_text(LOG)
    return str(path)


def test_failures_name_the_task_and_keep_the_message(log):
    found = run_molecule.failures(log)
    assert [task for task, unused in found] == ["Destroy molecule instance(s)", "(molecule)"]
    destroy = found[0][1]
    assert destroy[0].startswith("failed: [localhost] (item=gpufleet-cluster-node2)")
    # A long result is cut to the lines that say what failed.
    assert destroy[1:] == ["  msg: 'An unexpected requests error occurred when trying to talk to the Docker daemon: "
                           "Read timed out.'"]


def test_a_short_result_is_kept_whole(tmp_path):
    path = tmp_path / "short.log"
    path.write_text("TASK [t]\nfatal: [h]: FAILED! =>\n  changed: false\n  msg: boom\nPLAY RECAP\n")
    assert run_molecule.failures(str(path)) == [("t", ["fatal: [h]: FAILED! =>", "  changed: false", "  msg: boom"])]


def test_retries_and_ignored_failures_are_left_out(log):
    text = "\n".join(line for unused, block in run_molecule.failures(log) for line in block)
    assert "RETRYING" not in text
    assert "127.0.0.1:9" not in text


def test_molecule_lists_the_tasks_that_changed_on_the_second_run(log):
    unused, block = run_molecule.failures(log)[-1]
    assert block == ["CRITICAL Idempotence test failed because of the following tasks:",
                     "*  [node1] => gpufleet.cluster.interconnect : Write the hostfile",
                     "*  [node2] => gpufleet.cluster.interconnect : Write the hostfile"]


def test_long_lines_are_cut_and_only_the_last_failures_kept(tmp_path):
    path = tmp_path / "many.log"
    failures = "".join("TASK [t%d]\nfatal: [h]: FAILED! => msg: %s\n" % (n, "x" * 500) for n in range(6))
    path.write_text("CRITICAL \x1b[31mIdempotence test failed\x1b[0m\n" + failures)
    found = run_molecule.failures(str(path), most=4, width=100)
    assert [task for task, unused in found] == ["t2", "t3", "t4", "t5"]
    assert all(len(block[0]) == 100 for unused, block in found)
    assert run_molecule.failures(str(path), most=7)[0] == ("(molecule)", ["CRITICAL Idempotence test failed"])


def test_lines_that_only_repeat_the_return_code_are_left_out(tmp_path):
    path = tmp_path / "rc.log"
    path.write_text("CRITICAL Ansible return code was 2, command was: ansible-playbook verify.yml\n"
                    "ERROR    [x > verify] Executed: Failed\n")
    assert run_molecule.failures(str(path)) == []


def test_a_log_without_failures_gives_nothing(tmp_path):
    path = tmp_path / "ok.log"
    path.write_text("TASK [x]\nok: [h]\n")
    assert run_molecule.failures(str(path)) == []


def test_the_note_that_there_is_no_default_scenario_is_no_failure(tmp_path):
    # The line molecule 25 prints first under `molecule test -s <scenario>` in a project without molecule/default.
    path = tmp_path / "glob.log"
    path.write_text("CRITICAL 'molecule/default/molecule.yml' glob failed.  Exiting.\n"
                    "INFO     default scenario not found, disabling shared state.\n")
    assert run_molecule.failures(str(path)) == []
