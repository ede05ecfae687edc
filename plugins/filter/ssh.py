# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the SSH roles; the work is done in module_utils/ssh_policy.py (pure functions)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: sshd_runtime_drift
short_description: What the running sshd serves that differs from the configuration on disk
version_added: "0.1.0"
description:
  - Input is the debug output of C(ssh -vv) against the running sshd, the argument the output of
    C(sshd -T). Returns readable differences of KEX, host key, cipher and MAC lists and of the offered
    authentication methods; an empty list means the daemon serves what is on disk.
  - Companion filters in this file are C(gpufleet.cluster.sshd_effective) (C(sshd -T) as a dict),
    C(gpufleet.cluster.ssh_kexinit) (the server KEXINIT from C(ssh -vv)),
    C(gpufleet.cluster.known_hosts_lines) (ssh_known_hosts lines, keeping nodes this run did not reach),
    C(gpufleet.cluster.cluster_known_hosts) (the cluster's ssh_known_hosts lines with names from the inventory:
    C(hosts | gpufleet.cluster.cluster_known_hosts(hostvars, current_text, trust_fact_names)); fails on pattern
    characters, a name or address claimed by two nodes, or a host key that is not one valid ssh-ed25519 key),
    C(gpufleet.cluster.ssh_host_key) (the one C(ssh-ed25519 <base64>) key of a .pub file, or an error),
    C(gpufleet.cluster.hosts_without_address) (hosts for which the inventory and facts give no IP address)
    and C(gpufleet.cluster.addresses_in_networks) (addresses inside a list of CIDRs).
options:
  _input:
    description: Output of C(ssh -vv) (stdout and stderr together).
    type: str
    required: true
  effective:
    description: Output of C(sshd -T).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Compare the running sshd with the configuration on disk
  ansible.builtin.set_fact:
    drift: "{{ probe.stderr | gpufleet.cluster.sshd_runtime_drift(sshd_t.stdout) }}"
"""

RETURN = r"""
_value:
  description: Readable differences; empty when the running sshd matches the configuration on disk.
  type: list
  elements: str
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.cluster import node_own_addresses
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter
from ansible_collections.gpufleet.cluster.plugins.module_utils.ssh_policy import (
    addresses_in_networks,
    cluster_known_hosts,
    known_hosts_lines,
    parse_host_key,
    parse_kexinit_probe,
    parse_sshd_effective,
    runtime_drift,
)


def sshd_runtime_drift(probe_text, effective_text):
    return runtime_drift(parse_kexinit_probe(probe_text), parse_sshd_effective(effective_text))


_known_hosts_lines = as_filter(known_hosts_lines)
_addresses_in_networks = as_filter(addresses_in_networks, "not a CIDR network: ")
_ssh_host_key = as_filter(lambda text, host="this node": parse_host_key(text, host))
_cluster_known_hosts = as_filter(
    lambda hosts, hostvars, existing_text="", trust_fact_names=False:
    cluster_known_hosts(hostvars, hosts, existing_text or "", bool(trust_fact_names)))


def _hosts_without_address(hosts, hostvars):
    return [host for host in hosts if not node_own_addresses(hostvars.get(host) or {})]


class FilterModule(object):
    def filters(self):
        return {
            "sshd_effective": parse_sshd_effective,
            "ssh_kexinit": parse_kexinit_probe,
            "sshd_runtime_drift": sshd_runtime_drift,
            "known_hosts_lines": _known_hosts_lines,
            "addresses_in_networks": _addresses_in_networks,
            "cluster_known_hosts": _cluster_known_hosts,
            "ssh_host_key": _ssh_host_key,
            "hosts_without_address": _hosts_without_address,
        }
