# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""How gpufleet names a node's cluster address, shared by the roles and filters (no Ansible import)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.input_policy import checked_network


def group_hosts(group_names, groups):
    """The hosts of the named inventory groups, each once, in the order the groups list them; a group the inventory
    does not have adds nothing (a fleet without login nodes has no login_nodes group)."""
    if isinstance(group_names, str):
        group_names = [group_names]
    hosts = []
    for name in group_names or []:
        for host in (groups or {}).get(name) or []:
            if host not in hosts:
                hosts.append(host)
    return hosts


def node_address(host_vars, name):
    """The address nodes reach each other on: gpufleet_cluster_address, else ansible_host, else the name."""
    return host_vars.get("gpufleet_cluster_address") or host_vars.get("ansible_host") or name


def _ip(value):
    try:
        return ipaddress.ip_address(str(value).strip().split("%", 1)[0])
    except ValueError:
        return None


def node_own_addresses(host_vars, name=None, resolve=None):
    """The IP addresses a node is trusted at: from the inventory, else from the controller's own name resolution.

    Inventory values come first and alone when there are any: gpufleet_cluster_address, ansible_host and the list
    gpufleet_node_addresses. A node the inventory names by DNS name only gets the addresses ``resolve`` (the
    controller's resolver, injected by the filter; None resolves nothing) gives for its gpufleet_cluster_address,
    else its ansible_host, else its inventory ``name``. Never what the node reports about itself (its facts): a
    root-compromised node could put any address into every node's trust lists. trusted_addresses() then still
    refuses an address two nodes claim.
    """
    listed = [host_vars.get("gpufleet_cluster_address"), host_vars.get("ansible_host")]
    listed += list(host_vars.get("gpufleet_node_addresses") or [])
    found = [address for address in (_ip(value) for value in listed if value) if address is not None]
    if not found and resolve is not None:
        target = host_vars.get("gpufleet_cluster_address") or host_vars.get("ansible_host") or name
        if target:
            found = [address for address in (_ip(value) for value in resolve(str(target)) or ()) if address is not None]
    return sorted(set(found), key=lambda a: (a.version, a))


def trusted_addresses(hostvars, hosts, networks=(), wide_networks=(), resolve=None):
    """The one set of sources every trust list uses: each node's own addresses, plus CIDRs trusted by opt-in.

    Feeds fail2ban's ignoreip, sshd's PerSourcePenaltyExemptList and Match Address, the nftables accept set and
    the cluster key's from= option, so all of them trust the same sources. Node addresses come from
    node_own_addresses() (inventory, else the controller's resolution of the name, never facts). Raises ValueError
    when a node has no address, when two hosts claim the same address (a node must not be able to borrow another's
    trust) or when a network is refused by input_policy.network_problem() (not a CIDR, host bits set, or wider than
    /16 or /48 without ``wide_networks`` naming it).
    """
    cidrs = []
    for network in networks or ():
        try:
            cidrs.append(checked_network(network, wide_networks))
        except ValueError as exc:
            raise ValueError("In the trusted networks, %s. Nothing was changed." % exc)
    owner = {}
    for host in sorted(set(hosts)):
        addresses = node_own_addresses(hostvars.get(host) or {}, host, resolve)
        if not addresses:
            raise ValueError(
                "No IP address is known for %s: nodes are trusted at the addresses the inventory gives "
                "(gpufleet_cluster_address, an IP ansible_host or gpufleet_node_addresses) or at those the controller "
                "resolves their name to, never at what a node reports about itself. Set gpufleet_cluster_address "
                "for it. Nothing was changed." % host)
        for address in addresses:
            if address in owner and owner[address] != host:
                raise ValueError(
                    "%s is claimed by both %s and %s: every node needs its own address (check "
                    "gpufleet_cluster_address, ansible_host, gpufleet_node_addresses and what the controller resolves "
                    "their names to). Nothing was changed." % (address, owner[address], host))
            owner[address] = host
    addresses = [str(a) for a in sorted(owner, key=lambda a: (a.version, a))]
    return addresses + [str(n) for n in sorted(set(cidrs), key=lambda n: (n.version, n))]
