"""Cluster addresses the roles derive from the inventory and the controller's name resolution, never from facts."""
import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import cluster

HOSTVARS = {
    # Reached this run: facts present.
    "node1": {"ansible_host": "node1.example", "gpufleet_cluster_address": "10.0.0.11",
              "ansible_facts": {"default_ipv4": {"address": "10.0.0.11"}}},
    # Outside --limit: no facts, the inventory still names its address.
    "node2": {"ansible_host": "10.0.0.12"},
    # Reached through docker exec: ansible_host is a container name.
    "node3": {"ansible_host": "gpufleet-node3", "ansible_facts": {"default_ipv4": {"address": "10.0.0.13"}}},
    "node4": {"ansible_host": "fd00::4"},
}


def test_node_address_prefers_the_cluster_address():
    assert cluster.node_address(HOSTVARS["node1"], "node1") == "10.0.0.11"
    assert cluster.node_address(HOSTVARS["node2"], "node2") == "10.0.0.12"
    assert cluster.node_address({}, "node9") == "node9"


def resolver(table):
    """A stand-in for the controller's resolver: name -> addresses, nothing for other names."""
    asked = []

    def resolve(name):
        asked.append(name)
        return list(table.get(name, []))
    resolve.asked = asked
    return resolve


def test_trusted_addresses_are_the_inventory_addresses_not_what_a_node_claims():
    hostvars = {
        # The inventory names the address: a node's facts claiming another address change nothing.
        "node1": {"gpufleet_cluster_address": "10.0.0.11", "ansible_facts": {"default_ipv4": {"address": "10.0.0.99"}}},
        "node2": {"ansible_host": "10.0.0.12", "gpufleet_node_addresses": ["10.1.0.12"]},
        # Named by DNS only: the controller resolves its name; its default address fact is never used.
        "node3": {"ansible_host": "node3.example", "ansible_facts": {"default_ipv4": {"address": "203.0.113.66"}}},
    }
    resolve = resolver({"node3.example": ["10.0.0.13"]})
    assert cluster.trusted_addresses(hostvars, ["node1", "node2", "node3"], resolve=resolve) == [
        "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.1.0.12"]
    # Only the node without an IP in the inventory is resolved.
    assert resolve.asked == ["node3.example"]


def test_a_root_compromised_node_cannot_put_an_outside_address_into_the_trust_lists():
    # node3 reports an outside address as its own; the controller does not resolve its name: refused, not trusted.
    hostvars = {"node1": {"ansible_host": "10.0.0.11"},
                "node3": {"ansible_host": "gpufleet-node3", "ansible_facts": {"default_ipv4": {"address": "203.0.113.66"}}}}
    with pytest.raises(ValueError, match=r"No IP address is known for node3: .*never at what a node reports about "
                                         r"itself\. Set gpufleet_cluster_address for it\. Nothing was changed\."):
        cluster.trusted_addresses(hostvars, ["node1", "node3"], resolve=resolver({}))
    # Without a resolver (pure use), facts still give nothing.
    assert cluster.node_own_addresses(hostvars["node3"], "node3") == []


def test_the_name_resolved_is_the_cluster_address_then_ansible_host_then_the_inventory_name():
    table = {"gpu1.mgmt": ["10.9.0.1"], "gpu1.example": ["10.0.0.21", "fd00::21"], "gpu2": ["10.0.0.22"]}
    hv1 = {"gpufleet_cluster_address": "gpu1.example", "ansible_host": "gpu1.mgmt"}
    assert [str(a) for a in cluster.node_own_addresses(hv1, "gpu1", resolver(table))] == ["10.0.0.21", "fd00::21"]
    assert [str(a) for a in cluster.node_own_addresses({"ansible_host": "gpu1.mgmt"}, "gpu1", resolver(table))] == [
        "10.9.0.1"]
    assert [str(a) for a in cluster.node_own_addresses({}, "gpu2", resolver(table))] == ["10.0.0.22"]
    # A zone suffix from the resolver is dropped; a non-address is ignored.
    assert [str(a) for a in cluster.node_own_addresses({}, "n", lambda name: ["fe80::1%eth0", "junk"])] == ["fe80::1"]


def test_two_names_that_resolve_to_one_address_are_refused():
    hostvars = {"node1": {"ansible_host": "10.0.0.11"}, "node2": {"ansible_host": "node2.example"}}
    with pytest.raises(ValueError, match=r"10\.0\.0\.11 is claimed by both node1 and node2.*Nothing was changed"):
        cluster.trusted_addresses(hostvars, ["node1", "node2"], resolve=resolver({"node2.example": ["10.0.0.11"]}))


def test_trusted_addresses_add_cidrs_only_when_asked():
    hostvars = {"node1": {"ansible_host": "10.0.0.11"}}
    assert cluster.trusted_addresses(hostvars, ["node1"]) == ["10.0.0.11"]
    assert cluster.trusted_addresses(hostvars, ["node1"], ["10.9.0.0/16"]) == ["10.0.0.11", "10.9.0.0/16"]


def test_an_address_claimed_by_two_nodes_is_refused():
    hostvars = {"node1": {"ansible_host": "10.0.0.11"},
                "node2": {"ansible_host": "gpufleet-node2", "gpufleet_node_addresses": ["10.0.0.11"]}}
    with pytest.raises(ValueError, match="10.0.0.11 is claimed by both node1 and node2"):
        cluster.trusted_addresses(hostvars, ["node1", "node2"])


def test_a_trusted_network_that_is_not_a_cidr_is_refused():
    with pytest.raises(ValueError, match="not a CIDR"):
        cluster.trusted_addresses({}, [], ["cluster-net"])


@pytest.mark.parametrize("network, message", [
    # Host bits: 10.1.2.3/0 would become 0.0.0.0/0 in every trust list.
    ("10.1.2.3/0", r"'10\.1\.2\.3/0' has host bits set: write 0\.0\.0\.0/0 .* or 10\.1\.2\.3 for that address"),
    ("10.20.0.7/24", r"'10\.20\.0\.7/24' has host bits set: write 10\.20\.0\.0/24"),
    ("0.0.0.0/0", r"0\.0\.0\.0/0 is wider than /16 .* name 0\.0\.0\.0/0 in gpufleet_wide_networks"),
    ("10.0.0.0/8", r"10\.0\.0\.0/8 is wider than /16"),
    ("fd00::/32", r"fd00::/32 is wider than /48"),
    ("::/0", r"::/0 is wider than /48"),
])
def test_a_network_with_host_bits_or_too_wide_is_refused(network, message):
    with pytest.raises(ValueError, match=r"^In the trusted networks, " + message + r".*Nothing was changed\.$"):
        cluster.trusted_addresses({}, [], [network])


def test_a_wide_network_is_trusted_only_when_the_opt_in_names_it_exactly():
    assert cluster.trusted_addresses({}, [], ["10.0.0.0/8", "fd00::/32"], ["10.0.0.0/8", "fd00::/32"]) == [
        "10.0.0.0/8", "fd00::/32"]
    # Naming a bigger or smaller network is not naming this one.
    with pytest.raises(ValueError, match="10.0.0.0/8 is wider than /16"):
        cluster.trusted_addresses({}, [], ["10.0.0.0/8"], ["10.0.0.0/7"])
    with pytest.raises(ValueError, match="10.0.0.0/8 is wider than /16"):
        cluster.trusted_addresses({}, [], ["10.0.0.0/8"], ["10.0.0.0/9"])
    # The narrowest allowed without opt-in.
    assert cluster.trusted_addresses({}, [], ["10.9.0.0/16", "fd00:1:2::/48", "10.9.0.5"]) == [
        "10.9.0.0/16", "10.9.0.5/32", "fd00:1:2::/48"]


def test_the_filter_resolves_names_with_the_controllers_resolver(monkeypatch):
    import socket

    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter.cluster import FilterModule
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import name_resolution

    def getaddrinfo(name, port, family=0, kind=0):
        if name == "gpu7.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.17", 0)),
                    (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::17", 0, 0, 0)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.17", 0))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(name_resolution.socket, "getaddrinfo", getaddrinfo)
    trusted = FilterModule().filters()["trusted_addresses"]
    hostvars = {"gpu7": {"ansible_host": "gpu7.example", "ansible_facts": {"default_ipv4": {"address": "198.51.100.7"}}},
                "gpu8": {"ansible_host": "gpufleet-gpu8", "ansible_facts": {"default_ipv4": {"address": "198.51.100.8"}}}}
    assert trusted(["gpu7"], hostvars) == ["10.0.0.17", "fd00::17"]
    with pytest.raises(AnsibleFilterError, match="No IP address is known for gpu8"):
        trusted(["gpu7", "gpu8"], hostvars)
    with pytest.raises(AnsibleFilterError, match="10.0.0.0/8 is wider than /16"):
        trusted(["gpu7"], hostvars, ["10.0.0.0/8"])
    assert trusted(["gpu7"], hostvars, ["10.0.0.0/8"], ["10.0.0.0/8"])[-1] == "10.0.0.0/8"
    assert name_resolution.controller_addresses("gpu8.nowhere") == []


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
