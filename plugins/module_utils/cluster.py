# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""How gpufleet names a node's cluster address, shared by the roles and filters (no Ansible import)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress


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
        return ipaddress.ip_address(str(value).strip())
    except ValueError:
        return None


def node_own_addresses(host_vars):
    """The IP addresses the inventory gives for one node, else (no inventory address) its default IPv4 fact.

    Inventory values come first and alone when there are any: gpufleet_cluster_address, ansible_host and the
    list gpufleet_node_addresses. Only a node the inventory names by DNS name only falls back to the default
    IPv4 address its own facts report; trusted_addresses() then still refuses an address two nodes claim.
    """
    listed = [host_vars.get("gpufleet_cluster_address"), host_vars.get("ansible_host")]
    listed += list(host_vars.get("gpufleet_node_addresses") or [])
    found = [address for address in (_ip(value) for value in listed if value) if address is not None]
    if not found:
        facts = host_vars.get("ansible_facts") or {}
        fact = _ip((facts.get("default_ipv4") or {}).get("address") or "")
        found = [fact] if fact is not None else []
    return sorted(set(found), key=lambda a: (a.version, a))


def trusted_addresses(hostvars, hosts, networks=()):
    """The one set of sources every trust list uses: each node's own addresses, plus CIDRs trusted by opt-in.

    Feeds fail2ban's ignoreip, sshd's PerSourcePenaltyExemptList and Match Address, the nftables accept set and
    the cluster key's from= option, so all of them trust the same sources. Raises ValueError when two hosts
    claim the same address (a node must not be able to borrow another's trust) or a network is not a CIDR.
    """
    owner = {}
    for host in sorted(set(hosts)):
        for address in node_own_addresses(hostvars.get(host) or {}):
            if address in owner and owner[address] != host:
                raise ValueError(
                    "%s is claimed by both %s and %s: every node needs its own address (check "
                    "gpufleet_cluster_address, ansible_host and gpufleet_node_addresses). Nothing was changed."
                    % (address, owner[address], host))
            owner[address] = host
    cidrs = []
    for network in networks or ():
        try:
            cidrs.append(ipaddress.ip_network(str(network).strip(), strict=False))
        except ValueError:
            raise ValueError("%r in the trusted networks is not a CIDR network (e.g. 10.0.0.0/24)." % (network,))
    addresses = [str(a) for a in sorted(owner, key=lambda a: (a.version, a))]
    return addresses + [str(n) for n in sorted(set(cidrs), key=lambda n: (n.version, n))]
