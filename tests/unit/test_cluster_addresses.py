"""Cluster addresses the roles derive from the inventory and the facts."""
import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import cluster

HOSTVARS = {
    # Reached this run: facts present.
    "node1": {"ansible_host": "node1.example", "gpufleet_cluster_address": "10.0.0.11",
              "ansible_facts": {"default_ipv4": {"address": "10.0.0.11"}}},
    # Outside --limit: no facts, the inventory still names its address.
    "node2": {"ansible_host": "10.0.0.12"},
    # Reached through docker exec: ansible_host is a container name, the facts give the address.
    "node3": {"ansible_host": "gpufleet-node3", "ansible_facts": {"default_ipv4": {"address": "10.0.0.13"}}},
    "node4": {"ansible_host": "fd00::4"},
}


def test_node_address_prefers_the_cluster_address():
    assert cluster.node_address(HOSTVARS["node1"], "node1") == "10.0.0.11"
    assert cluster.node_address(HOSTVARS["node2"], "node2") == "10.0.0.12"
    assert cluster.node_address({}, "node9") == "node9"


def test_trusted_addresses_are_the_inventory_addresses_not_what_a_node_claims():
    hostvars = {
        # The inventory names the address: a node's facts claiming another address change nothing.
        "node1": {"gpufleet_cluster_address": "10.0.0.11", "ansible_facts": {"default_ipv4": {"address": "10.0.0.99"}}},
        "node2": {"ansible_host": "10.0.0.12", "gpufleet_node_addresses": ["10.1.0.12"]},
        # Named by DNS only: its default address fact is used.
        "node3": {"ansible_host": "gpufleet-node3", "ansible_facts": {"default_ipv4": {"address": "10.0.0.13"}}},
    }
    assert cluster.trusted_addresses(hostvars, ["node1", "node2", "node3"]) == [
        "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.1.0.12"]


def test_trusted_addresses_add_cidrs_only_when_asked():
    hostvars = {"node1": {"ansible_host": "10.0.0.11"}}
    assert cluster.trusted_addresses(hostvars, ["node1"]) == ["10.0.0.11"]
    assert cluster.trusted_addresses(hostvars, ["node1"], ["10.9.0.0/16"]) == ["10.0.0.11", "10.9.0.0/16"]


def test_an_address_claimed_by_two_nodes_is_refused():
    hostvars = {"node1": {"ansible_host": "10.0.0.11"},
                "node2": {"ansible_host": "gpufleet-node2", "ansible_facts": {"default_ipv4": {"address": "10.0.0.11"}}}}
    with pytest.raises(ValueError, match="10.0.0.11 is claimed by both node1 and node2"):
        cluster.trusted_addresses(hostvars, ["node1", "node2"])


def test_a_trusted_network_that_is_not_a_cidr_is_refused():
    with pytest.raises(ValueError, match="not a CIDR"):
        cluster.trusted_addresses({}, [], ["cluster-net"])


def test_group_hosts_lists_each_host_once_and_skips_missing_groups():
    from ansible_collections.gpufleet.cluster.plugins.filter.cluster import FilterModule
    group_hosts = FilterModule().filters()["group_hosts"]
    groups = {"gpu_nodes": ["n1", "n2"], "login_nodes": ["login1", "n2"], "all": ["n1", "n2", "login1"]}
    assert group_hosts(["gpu_nodes", "login_nodes"], groups) == ["n1", "n2", "login1"]
    assert group_hosts(["login_nodes", "gpu_nodes"], groups) == ["login1", "n2", "n1"]
    # A fleet without the group: nothing from it, and no error.
    assert group_hosts(["gpu_nodes", "storage_nodes"], groups) == ["n1", "n2"]
    assert group_hosts("gpu_nodes", groups) == ["n1", "n2"]
    assert group_hosts([], groups) == []
