# -*- coding: utf-8 -*-
"""ssh_known_hosts built from the inventory: a node cannot claim another node's name or address, nor a pattern.

Host keys below were made with ``ssh-keygen -q -t ed25519 -N '' -C root@nodeN`` (OpenSSH_9.2p1 Debian-2+deb12u6)
for these tests; the ECDSA key with ``ssh-keygen -t ecdsa`` (nistp256) the same way.
"""
import pytest

from ansible_collections.gpufleet.cluster.plugins.filter import ssh as ssh_filter
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_policy import (
    cluster_known_hosts,
    known_hosts_name,
    node_names,
    parse_host_key,
    ssh_config_hosts,
)

KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK8Xv0kCpkbICjqCyXNrDoP10Zj2MdN2P2LzEGXlyyUX"
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDTNWLSkkGKdIl66GxhwPpTflKgd+X735Cxo87SX8acp"
ECDSA = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBPtr5NIo9f7gHdp212Aq3W3p/K7Pf+gqkh3NNqK"
         "dTO1n6UPtSXwLPreuYbhlhEknAZBpPtrI/WyMnxEC+KGyWO8=")


# The controller's name resolution: node2 is named by DNS in the inventory and resolves to 10.0.0.12.
RESOLVED = {"node2.cluster.example": ["10.0.0.12"]}


def resolve(name):
    return RESOLVED.get(name, [])


def hostvars(**overrides):
    """Two nodes: node1 named by address in the inventory, node2 by DNS (its address comes from the controller's
    resolution of that name; the default_ipv4 fact it reports is never used)."""
    base = {
        "node1": {"ansible_host": "10.0.0.11",
                  "ansible_facts": {"hostname": "node1", "fqdn": "node1.cluster.example",
                                    "default_ipv4": {"address": "10.0.0.11"}},
                  "cluster_ssh_node_identity": {"key": KEY1 + " root@node1\n", "extra_names": []}},
        "node2": {"ansible_host": "node2.cluster.example",
                  "ansible_facts": {"hostname": "node2", "fqdn": "node2.cluster.example",
                                    "default_ipv4": {"address": "10.0.0.12"}},
                  "cluster_ssh_node_identity": {"key": KEY2 + " root@node2\n", "extra_names": []}},
    }
    for host, values in overrides.items():
        base[host] = dict(base[host], **values)
    return base


def facts(host, **values):
    merged = dict(hostvars()[host]["ansible_facts"], **values)
    return {"ansible_facts": merged}


def identity(host, **values):
    merged = dict(hostvars()[host]["cluster_ssh_node_identity"], **values)
    return {"cluster_ssh_node_identity": merged}


def test_names_come_from_the_inventory_and_facts_only_where_they_repeat_it():
    lines = cluster_known_hosts(hostvars(), ["node1", "node2"], resolve=resolve)
    assert lines == ["node1,10.0.0.11 " + KEY1, "node2,node2.cluster.example,10.0.0.12 " + KEY2]


def test_fact_names_are_added_only_when_allowed():
    names, unused = node_names("node1", hostvars()["node1"])
    assert names == ["node1", "10.0.0.11"] and unused == ["node1.cluster.example"]
    names, unused = node_names("node1", hostvars()["node1"], trust_fact_names=True)
    assert names == ["node1", "10.0.0.11", "node1.cluster.example"] and unused == []


@pytest.mark.parametrize("bad", ["*", "node?", "!node2", "[10.0.0.12]:22", "node1,node2", "node 1", "node1\n", ""])
def test_pattern_characters_and_whitespace_are_refused_wherever_they_come_from(bad):
    with pytest.raises(ValueError, match="Nothing was changed"):
        known_hosts_name(bad, "node1", "cluster_ssh_extra_names")
    with pytest.raises(ValueError, match="cluster_ssh_extra_names"):
        cluster_known_hosts(hostvars(node1=identity("node1", extra_names=[bad])), ["node1", "node2"])


def test_a_node_reporting_star_as_its_hostname_stops_the_run():
    poisoned = hostvars(node1=facts("node1", hostname="*"))
    with pytest.raises(ValueError, match=r"ansible_facts.hostname.*pattern characters.*Nothing was changed"):
        cluster_known_hosts(poisoned, ["node1", "node2"])


def test_an_extra_name_that_is_another_nodes_address_is_refused():
    poisoned = hostvars(node1=identity("node1", extra_names=["10.0.0.12"]))
    with pytest.raises(ValueError, match="10.0.0.12 is claimed by both node1 and node2. *"):
        cluster_known_hosts(poisoned, ["node1", "node2"], resolve=resolve)


def test_an_address_written_differently_is_still_the_same_address():
    poisoned = hostvars(node1=identity("node1", extra_names=["fd00::0012"]),
                        node2={"gpufleet_node_addresses": ["fd00::12"]})
    with pytest.raises(ValueError, match="fd00::12 is claimed by both"):
        cluster_known_hosts(poisoned, ["node1", "node2"])


def test_a_reported_hostname_naming_another_node_is_refused_even_when_not_used():
    poisoned = hostvars(node1=facts("node1", hostname="node2", fqdn="node2.cluster.example"))
    with pytest.raises(ValueError, match="node1 reports node2 as its own name, but that is a name of node2"):
        cluster_known_hosts(poisoned, ["node1", "node2"])


def test_trusted_fact_names_claimed_twice_are_refused():
    clones = hostvars(node1=facts("node1", hostname="debian", fqdn="debian"),
                      node2=facts("node2", hostname="debian", fqdn="debian"))
    # Identical stock hostnames are ignored unless fact names are trusted, then they are a conflict.
    assert len(cluster_known_hosts(clones, ["node1", "node2"])) == 2
    with pytest.raises(ValueError, match="debian is claimed by both node1 and node2"):
        cluster_known_hosts(clones, ["node1", "node2"], trust_fact_names=True)


def test_localhost_never_becomes_a_name():
    names, unused = node_names("node1", facts("node1", hostname="localhost", fqdn="localhost.localdomain"),
                               trust_fact_names=True)
    assert "localhost" not in names and "localhost.localdomain" not in names and unused == []


def test_a_node_cannot_take_an_address_by_its_default_ipv4_fact():
    # node2 is named by DNS and reports node1's address, then an outside one, as its own: neither is used.
    for claimed in ("10.0.0.11", "203.0.113.66"):
        poisoned = hostvars(node2=facts("node2", default_ipv4={"address": claimed}))
        assert cluster_known_hosts(poisoned, ["node1", "node2"], resolve=resolve) == [
            "node1,10.0.0.11 " + KEY1, "node2,node2.cluster.example,10.0.0.12 " + KEY2]
        # Without the controller's resolution it has its inventory names only.
        assert cluster_known_hosts(poisoned, ["node1", "node2"]) == [
            "node1,10.0.0.11 " + KEY1, "node2,node2.cluster.example " + KEY2]


@pytest.mark.parametrize("text, problem", [
    (KEY1 + "\n" + KEY2 + "\n", "2 key lines"),
    ("", "0 key lines"),
    (ECDSA, "not an ssh-ed25519 key"),
    ("ssh-ed25519 !!!notbase64", "not an ed25519 public key"),
    # A valid ed25519 blob under another type name, and an ECDSA blob labelled ed25519.
    ("ssh-ed25519 " + ECDSA.split()[1], "not an ed25519 public key"),
    ("ssh-ed25519 " + KEY1.split()[1][:-4], "not an ed25519 public key"),
    ("*,node2 " + KEY2, "not an ssh-ed25519 key"),
])
def test_host_key_must_be_one_valid_ed25519_key(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_host_key(text, "node1")
    poisoned = hostvars(node1=identity("node1", key=text))
    if text:
        with pytest.raises(ValueError, match="node1: its host key is not a single valid"):
            cluster_known_hosts(poisoned, ["node1", "node2"])


def test_host_key_keeps_type_and_key_and_drops_the_comment():
    assert parse_host_key("# header\n" + KEY1 + " root@node1\n", "node1") == KEY1


def test_an_unreached_node_keeps_its_current_key_under_its_inventory_names():
    limited = hostvars()
    del limited["node2"]["cluster_ssh_node_identity"]
    del limited["node2"]["ansible_facts"]
    limited["node2"]["ansible_host"] = "10.0.0.12"
    existing = "node2,10.0.0.12 %s\n*,10.0.0.99 %s\nstranger %s\n" % (KEY2, KEY1, KEY1)
    assert cluster_known_hosts(limited, ["node1", "node2"], existing) == [
        "node1,10.0.0.11 " + KEY1, "node2,10.0.0.12 " + KEY2]


def test_an_unreached_node_with_two_current_keys_stops_the_run():
    limited = hostvars()
    del limited["node2"]["cluster_ssh_node_identity"]
    limited["node2"]["ansible_host"] = "10.0.0.12"
    existing = "node2 %s\n10.0.0.12 %s\n" % (KEY2, KEY1)
    with pytest.raises(ValueError, match="2 different keys"):
        cluster_known_hosts(limited, ["node1", "node2"], existing)


def test_filters_raise_ansible_errors_with_the_message(monkeypatch):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import name_resolution
    monkeypatch.setattr(name_resolution, "controller_addresses", resolve)
    filters = ssh_filter.FilterModule().filters()
    assert filters["cluster_known_hosts"](["node1", "node2"], hostvars()) == [
        "node1,10.0.0.11 " + KEY1, "node2,node2.cluster.example,10.0.0.12 " + KEY2]
    with pytest.raises(AnsibleFilterError, match="Nothing was changed"):
        filters["cluster_known_hosts"](["node1", "node2"], hostvars(node1=facts("node1", hostname="*")))
    assert filters["hosts_without_address"](["node1", "node2", "node3"],
                                            dict(hostvars(), node3={"ansible_host": "node3.example"})) == ["node3"]


def test_a_node_on_another_port_is_written_name_colon_port_and_kept_across_limited_runs():
    nodes = hostvars(node2={"gpufleet_ssh_port": 2222})
    lines = cluster_known_hosts(nodes, ["node1", "node2"], resolve=resolve, ssh_port=22)
    assert lines == ["[node2]:2222,[node2.cluster.example]:2222,[10.0.0.12]:2222 " + KEY2,
                     "node1,10.0.0.11 " + KEY1]
    # A --limit run that reached node1 only keeps node2's key from the file it wrote.
    unreached = hostvars(node2={"gpufleet_ssh_port": 2222, "cluster_ssh_node_identity": None})
    assert cluster_known_hosts(unreached, ["node1", "node2"], existing_text="\n".join(lines) + "\n",
                               resolve=resolve) == lines


def test_the_shared_port_applies_to_every_node_the_inventory_gives_none():
    lines = cluster_known_hosts(hostvars(), ["node1", "node2"], resolve=resolve, ssh_port=2222)
    assert all(entry.startswith("[") and entry.endswith("]:2222")
               for line in lines for entry in line.split()[0].split(","))
    assert ssh_filter.FilterModule().filters()["known_hosts_by_port"](lines) == [
        [2222, ["10.0.0.11", "10.0.0.12", "node1", "node2", "node2.cluster.example"]]]


def test_ssh_config_blocks_are_one_per_port_with_bare_names():
    lines = cluster_known_hosts(hostvars(node2={"gpufleet_ssh_port": "2200"}), ["node1", "node2"], resolve=resolve)
    assert ssh_config_hosts(lines) == [[22, ["10.0.0.11", "node1"]],
                                       [2200, ["10.0.0.12", "node2", "node2.cluster.example"]]]


@pytest.mark.parametrize("port", [0, 65536, "ssh", True])
def test_a_port_that_is_not_a_port_number_is_refused_before_anything_is_written(port):
    with pytest.raises(ValueError, match=r"node2: gpufleet_ssh_port .* is not a port number.*Nothing was changed"):
        cluster_known_hosts(hostvars(node2={"gpufleet_ssh_port": port}), ["node1", "node2"], resolve=resolve)
