# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""How gpufleet names a node's cluster address, shared by the roles and filters (no Ansible import)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress


def node_address(host_vars, name):
    """The address nodes reach each other on: gpufleet_cluster_address, else ansible_host, else the name."""
    return host_vars.get("gpufleet_cluster_address") or host_vars.get("ansible_host") or name


def node_ip_addresses(hostvars, hosts):
    """Every IP address the inventory and the gathered facts give for the hosts, sorted, each once.

    Inventory values (gpufleet_cluster_address, ansible_host) are always there, so a --limit run that
    reaches only some nodes still lists the others; facts (default IPv4 address) add what they know.
    Names that are not IP addresses are left out.
    """
    found = set()
    for host in hosts:
        host_vars = hostvars[host]
        facts = host_vars.get("ansible_facts") or {}
        default_ipv4 = (facts.get("default_ipv4") or {}).get("address")
        for value in (host_vars.get("gpufleet_cluster_address"), host_vars.get("ansible_host"), default_ipv4):
            try:
                found.add(ipaddress.ip_address(str(value).strip()))
            except ValueError:
                continue
    return [str(address) for address in sorted(found, key=lambda a: (a.version, a))]
