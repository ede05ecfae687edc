"""Acceptance tests: is this node done? Run against any inventory, over Ansible's connection settings.

    pytest tests/acceptance --hosts=ansible://gpu_nodes --ansible-inventory=inventories/prod -v -rs

What each node should look like is rendered by Ansible from that inventory (tests/acceptance/expectations.yml:
the inventory's values, else the roles' defaults), never written into the tests. A check that needs a GPU, or
something the inventory switched off, is skipped with its reason and never reported as passed.

How the nodes are reached: testinfra's ansible:// backend reads the inventory through `ansible-inventory
--list`, which gives the values unrendered (a user of "{{ gpufleet_admin_user }}", a key path with
"{{ inventory_dir }}" in it). So the same play that renders the expectations also renders each host's connection
settings (host, port, user, key, SSH arguments with their known_hosts), and testinfra gets an inventory of those
rendered values, written for the session into a private temporary directory: its SSH backend then reaches every
node the way Ansible does, one ssh per command (multiplexed). An inventory that reaches a node with a password
(SSH or become) is not copied: every command then goes through Ansible itself (testinfra's --force-ansible),
which is slower but handles passwords and vaults. Commands run as root through sudo, as the admin account
Ansible logs in with does, whether or not the inventory sets ansible_become.
"""
import os
import shutil
import tempfile

import pytest
import yaml

from fleet import Expect, Node

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPECTATIONS_PLAYBOOK = os.path.join(HERE, "expectations.yml")
EXPECTATIONS_TASK = "Show the expectations of this node"


def _target(config):
    """The inventory and host patterns asked for, or None when the run names no Ansible inventory and hosts."""
    specs = [s for s in (config.option.hosts or "").split(",") if s]
    if not specs or not all(s.startswith("ansible://") for s in specs) or not config.option.ansible_inventory:
        return None
    return config.option.ansible_inventory


def pytest_configure(config):
    inventory = _target(config)
    if inventory is None:
        return
    found, failed = render_expectations(inventory)
    config.gpufleet_expectations = (found, failed)
    if any(data.get("connection_password") for data in found.values()):
        config.option.force_ansible = True
        config.option.sudo = True
        return
    config.gpufleet_tmp = tempfile.mkdtemp(prefix="gpufleet-acceptance-")
    config.option.ansible_inventory = write_connection_inventory(found, config.gpufleet_tmp)


def pytest_unconfigure(config):
    if getattr(config, "gpufleet_tmp", None):
        shutil.rmtree(config.gpufleet_tmp, ignore_errors=True)


def render_expectations(inventory):
    """({inventory host: expectations}, {host: error}) from tests/acceptance/expectations.yml, run with
    ansible-runner. The play runs on every host of the inventory (a debug task on the controller, no connection),
    so the fail2ban and sshd checks can read the other nodes' addresses too."""
    import ansible_runner

    found, failed = {}, {}

    def on_event(event):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == EXPECTATIONS_TASK:
            found[data["host"]] = data["res"]["msg"]
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            failed[data.get("host")] = data.get("res", {}).get("msg", "")
        return False  # nothing is written to disk

    if not os.path.exists(inventory):
        raise pytest.UsageError("--ansible-inventory %s does not exist" % inventory)
    env = {"ANSIBLE_CONFIG": os.environ.get("ANSIBLE_CONFIG") or os.path.join(ROOT, "ansible.cfg")}
    with tempfile.TemporaryDirectory(prefix="gpufleet-acceptance-") as private:
        result = ansible_runner.run(
            private_data_dir=private, project_dir=ROOT, playbook=EXPECTATIONS_PLAYBOOK,
            inventory=[os.path.abspath(inventory)], envvars=env, quiet=True, event_handler=on_event,
            suppress_env_files=True,
            # Keep ansible.cfg's fact cache: ansible-runner would otherwise point it at its own artifacts.
            fact_cache_type=None,
            cmdline="--tags gpufleet_acceptance --skip-tags always")
    if not found:
        raise pytest.UsageError("rendering %s for %s failed (rc=%s): %s"
                                % (os.path.relpath(EXPECTATIONS_PLAYBOOK, ROOT), inventory, result.rc,
                                   failed or "no host of the inventory answered"))
    return found, failed


def write_connection_inventory(found, directory):
    """An inventory of the rendered connection settings and the groups of every host; returns its path."""
    hosts, groups = {}, {}
    control = os.path.join(directory, "cp-%C")
    for name, data in sorted(found.items()):
        settings = {k: v for k, v in data["connection"].items() if v not in ("", None)}
        # The checks read as root: testinfra's SSH backend wraps every command in sudo for a become host.
        settings["ansible_become"] = True
        settings.pop("ansible_become_user", None)
        if settings.get("ansible_connection", "ssh") in ("ssh", "ansible.builtin.ssh", "smart"):
            # One SSH connection per node for the whole session, as Ansible's ControlPersist gives it.
            settings["ansible_ssh_common_args"] = (settings.get("ansible_ssh_common_args", "")
                                                   + " -o ControlPath=" + control).strip()
        hosts[name] = settings
        for group in data["groups"]:
            groups.setdefault(group, {"hosts": {}})["hosts"][name] = {}
    path = os.path.join(directory, "hosts.yml")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        yaml.safe_dump({"all": {"hosts": hosts, "children": groups}}, handle, default_flow_style=False)
    return path


@pytest.fixture(scope="session", autouse=True)
def _acceptance_target(request):
    """Refuse (as a skip, with the command to use) a run without an Ansible inventory and host pattern: without
    them testinfra would test the machine pytest runs on."""
    if not hasattr(request.config, "gpufleet_expectations"):
        pytest.skip("the acceptance tests run against an inventory: pytest tests/acceptance "
                    "--hosts=ansible://gpu_nodes --ansible-inventory=inventories/<name>")


@pytest.fixture(scope="module")
def expect(host, request):
    """The rendered expectations of the node under test."""
    found, failed = request.config.gpufleet_expectations
    name = host.ansible.get_variables()["inventory_hostname"]
    if name not in found:
        pytest.fail("no expectations were rendered for %s: %s" % (name, failed.get(name, "not in the play")))
    return Expect(found[name], name, found)


_STATE = {}


@pytest.fixture(scope="module")
def node(host, expect, request):
    """The node under test: commands as root and a few readings cached for the whole session."""
    return Node(host, _STATE.setdefault(expect.name, {}), expect.name, request.config.option.force_ansible)
