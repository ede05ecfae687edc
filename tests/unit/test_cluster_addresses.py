"""Cluster addresses the roles derive from the inventory and the facts."""
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


def test_inventory_and_facts_together_each_once_sorted():
    assert cluster.node_ip_addresses(HOSTVARS, ["node3", "node2", "node1", "node4"]) == [
        "10.0.0.11", "10.0.0.12", "10.0.0.13", "fd00::4"]


def test_a_limited_run_still_lists_unreached_nodes():
    limited = dict(HOSTVARS, node1={"ansible_host": "node1.example", "gpufleet_cluster_address": "10.0.0.11"})
    assert cluster.node_ip_addresses(limited, ["node1", "node2"]) == ["10.0.0.11", "10.0.0.12"]


def test_node_address_prefers_the_cluster_address():
    assert cluster.node_address(HOSTVARS["node1"], "node1") == "10.0.0.11"
    assert cluster.node_address(HOSTVARS["node2"], "node2") == "10.0.0.12"
    assert cluster.node_address({}, "node9") == "node9"
