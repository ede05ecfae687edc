"""The os_hardening nftables policy: the accept sets as tasks/nftables.yml works them out (its own Jinja
expressions, evaluated here with the collection's trusted_addresses filter) and the policy file
templates/gpufleet.nft.j2 renders from them.

Rendering uses Jinja2 with Ansible's template settings (trim_blocks on) and Ansible's own filters and tests;
`nft -c` is left to the role on a node.
"""
import os
import re

import jinja2
import jinja2.nativetypes
import pytest
import yaml

from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
from ansible.plugins.test.core import TestModule as CoreTests

from ansible_collections.gpufleet.cluster.plugins.filter import cluster
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import name_resolution

from conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "os_hardening")


def environment(native=False):
    kind = jinja2.nativetypes.NativeEnvironment if native else jinja2.Environment
    env = kind(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")), trim_blocks=True,
               undefined=jinja2.StrictUndefined)
    env.filters.update(CoreFilters().filters())
    env.filters.update(MathFilters().filters())
    env.tests.update(CoreTests().tests())
    return env


def _ansible_names(expression):
    """Jinja2 cannot parse dotted filter names; Ansible can. Quote them into plain identifiers."""
    return (expression.replace("gpufleet.cluster.trusted_addresses", "gpufleet_trusted_addresses")
            .replace("gpufleet.cluster.group_hosts", "gpufleet_group_hosts"))


SETS = ("__os_hardening_cluster4", "__os_hardening_cluster6", "__os_hardening_admin4", "__os_hardening_admin6")


def sets_task():
    with open(os.path.join(ROLE, "tasks", "nftables.yml")) as handle:
        tasks = yaml.safe_load(handle)
    return next(t for t in tasks if "gpufleet.cluster.managed_files" in t)


def accept_sets(hostvars, groups, **settings):
    """The accept sets the policy task's vars give, from its own expressions (in their order)."""
    env = environment(native=True)
    env.filters["gpufleet_trusted_addresses"] = cluster.cluster_trusted_addresses
    env.filters["gpufleet_group_hosts"] = cluster.cluster_group_hosts
    context = dict(hostvars=hostvars, groups=groups, os_hardening_cluster_groups=["gpu_nodes", "login_nodes"],
                   os_hardening_trusted_networks=[], os_hardening_admin_networks=[], os_hardening_wide_networks=[])
    context.update(settings)
    task = sets_task()
    for name, expression in task["vars"].items():
        context[name] = env.from_string(_ansible_names(expression)).render(**context)
    assert set(SETS) <= set(task["vars"])
    return dict((name, context[name]) for name in SETS)


def render(hostvars, groups, monitoring_network="", exporter_ports=(9100, 9400), ssh_ports=(22,), **settings):
    facts = accept_sets(hostvars, groups, **settings)
    return environment().get_template("gpufleet.nft.j2").render(
        ansible_managed="Ansible managed", os_hardening_monitoring_network=monitoring_network,
        os_hardening_nftables_exporter_ports=list(exporter_ports), os_hardening_nftables_ssh_ports=list(ssh_ports),
        **facts)


def rules(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def set_elements(text, name):
    match = re.search(r"set %s \{[^}]*elements = \{ ([^}]*) \} \}" % name, text)
    return match.group(1).split(", ") if match else None


HOSTVARS = {
    "gpu1": {"gpufleet_cluster_address": "10.20.0.11", "ansible_host": "192.168.1.11"},
    "gpu2": {"ansible_host": "10.20.0.12"},
    # Named by DNS: the controller resolves it (below); the outside address it reports about itself is never used.
    "login1": {"ansible_host": "login1.example", "ansible_facts": {"default_ipv4": {"address": "203.0.113.5"}}},
    "gpu6": {"ansible_host": "fd00:20::16"},
    "outsider": {"ansible_host": "10.20.0.99"},
}
GROUPS = {"gpu_nodes": ["gpu1", "gpu2", "gpu6"], "login_nodes": ["login1"], "all": list(HOSTVARS)}


@pytest.fixture(autouse=True)
def controller_resolution(monkeypatch):
    monkeypatch.setattr(name_resolution, "controller_addresses", {"login1.example": ["10.20.0.5"]}.get)


def test_only_the_nodes_own_addresses_reach_every_port():
    text = render(HOSTVARS, GROUPS, os_hardening_admin_networks=["192.0.2.0/24"])
    assert set_elements(text, "cluster4") == ["10.20.0.5", "10.20.0.11", "10.20.0.12", "192.168.1.11"]
    assert set_elements(text, "cluster6") == ["fd00:20::16"]
    # No whole CIDR in the any-port sets and no host outside the node groups.
    assert "10.20.0.0/24" not in text
    assert "10.20.0.99" not in text
    assert "ip saddr @cluster4 accept" in rules(text)
    assert "ip6 saddr @cluster6 accept" in rules(text)


def test_admin_networks_get_ssh_only_not_the_node_trust():
    text = render(HOSTVARS, GROUPS, ssh_ports=(22, 2222), os_hardening_admin_networks=["192.0.2.0/24", "2001:db8::/64"])
    assert set_elements(text, "admin4") == ["192.0.2.0/24"]
    assert set_elements(text, "admin6") == ["2001:db8::/64"]
    assert "192.0.2.0/24" not in set_elements(text, "cluster4")
    admin_rules = [r for r in rules(text) if "@admin" in r]
    assert admin_rules == ["ip saddr @admin4 tcp dport { 22, 2222 } accept",
                           "ip6 saddr @admin6 tcp dport { 22, 2222 } accept"]


def test_whole_networks_are_trusted_only_by_opt_in():
    text = render(HOSTVARS, GROUPS, os_hardening_trusted_networks=["10.30.0.0/16", "fd00:30::/64"],
                  os_hardening_admin_networks=["192.0.2.0/24"])
    assert set_elements(text, "cluster4")[-1] == "10.30.0.0/16"
    assert set_elements(text, "cluster6") == ["fd00:20::16", "fd00:30::/64"]


def test_monitoring_network_reaches_the_exporter_ports_only():
    text = render(HOSTVARS, GROUPS, monitoring_network="10.40.0.0/24", os_hardening_admin_networks=["192.0.2.0/24"])
    assert [r for r in rules(text) if "10.40.0.0/24" in r] == ["ip saddr 10.40.0.0/24 tcp dport { 9100, 9400 } accept"]


def test_policy_drops_by_default_and_replaces_only_its_own_table():
    text = render(HOSTVARS, GROUPS, os_hardening_admin_networks=["192.0.2.0/24"])
    assert "type filter hook input priority filter; policy drop;" in rules(text)
    assert rules(text)[:2] == ["table inet gpufleet", "delete table inet gpufleet"]


def test_an_address_claimed_by_two_nodes_is_refused():
    hostvars = dict(HOSTVARS, gpu2={"ansible_host": "10.20.0.11"})
    with pytest.raises(Exception, match=r"10\.20\.0\.11 is claimed by both gpu1 and gpu2.*Nothing was changed"):
        render(hostvars, GROUPS, os_hardening_admin_networks=["192.0.2.0/24"])


def test_a_trusted_network_that_is_no_cidr_is_refused():
    with pytest.raises(Exception, match=r"In the trusted networks, '10\.30\.0\.0/33' is not a CIDR network"):
        render(HOSTVARS, GROUPS, os_hardening_trusted_networks=["10.30.0.0/33"])


@pytest.mark.parametrize("network", ["10.1.2.3/0", "10.30.0.1/16", "10.0.0.0/8"])
def test_a_trusted_network_with_host_bits_or_too_wide_is_refused(network):
    with pytest.raises(Exception, match=r"In the trusted networks, .*(host bits|wider than /16).*Nothing was changed"):
        render(HOSTVARS, GROUPS, os_hardening_trusted_networks=[network], os_hardening_admin_networks=["192.0.2.0/24"])


def test_a_wide_network_named_in_the_opt_in_is_trusted():
    text = render(HOSTVARS, GROUPS, os_hardening_trusted_networks=["10.0.0.0/8"], os_hardening_wide_networks=["10.0.0.0/8"],
                  os_hardening_admin_networks=["192.0.2.0/24"])
    assert set_elements(text, "cluster4")[-1] == "10.0.0.0/8"
    assert "203.0.113.5" not in text
