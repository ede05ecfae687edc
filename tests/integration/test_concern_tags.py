"""The concern tags of docs/development.md, as ansible-playbook itself selects them (`--list-tasks --tags`): a
concern's tag runs that concern and the checks it needs (tagged always), nothing else that changes a node."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def listed(tags):
    """{role: [task names]} that `site.yml --tags <tags>` would run against inventories/prod."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "inventories/prod", "--list-tasks", "--tags", tags, "site.yml"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"^ {6}(?:gpufleet\.cluster\.(\w+) : )?(.+?)\tTAGS: \[(.*)\]$", line)
        if match:
            role, name, task_tags = match.group(1) or "", match.group(2), match.group(3).split(", ")
            tasks.setdefault(role, []).append((name, task_tags))
    return tasks


def concern_tasks(tasks, tag):
    return {role: [name for name, task_tags in entries if tag in task_tags] for role, entries in tasks.items()}


@pytest.mark.parametrize("tag, role, expected", [
    ("sysctl", "os_hardening", ["Write the kernel settings (applied at once on a real host)"]),
    ("nftables", "os_hardening", ["Inbound nftables policy"]),
    ("hostfile", "interconnect", ["Write the MPI hostfile on the node", "Write the MPI hostfile on the controller"]),
])
def test_a_concern_tag_runs_that_concern_and_the_checks_it_needs(tag, role, expected):
    tasks = listed(tag)
    mine = concern_tasks(tasks, tag)
    assert set(expected) <= set(mine[role]), mine[role]
    # Everything else listed is a check or a lookup that runs with every tag: no other concern's changes.
    for other_role, entries in tasks.items():
        for name, task_tags in entries:
            assert tag in task_tags or "always" in task_tags, (other_role, name, task_tags)
    # The node detection, the checks and the OS variables of the role come along, tagged always.
    assert ("Detect the node when preflight has not run yet", ["always", role]) in tasks[""]
    always = [name for name, task_tags in tasks[role] if "always" in task_tags]
    assert "Load the OS variables" in always, always
