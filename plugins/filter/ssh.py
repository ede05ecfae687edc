# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the SSH roles; the work is done in plugin_utils/ssh_policy.py (pure functions) and, for the key pair
on the controller, plugin_utils/ssh_keypair.py.

Each filter's documentation is plugins/filter/<filter name>.yml (ansible-doc -t filter gpufleet.cluster.<name>).
This file carries no DOCUMENTATION: ansible-doc would show it for every filter here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.cluster import node_own_addresses
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import name_resolution
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_keypair import keypair_drift
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_policy import (
    cluster_known_hosts,
    controller_address_outside,
    lockout_problems,
    parse_kexinit_probe,
    parse_sshd_effective,
    runtime_drift,
    ssh_config_hosts,
)


def sshd_runtime_drift(probe_text, effective_text):
    return runtime_drift(parse_kexinit_probe(probe_text), parse_sshd_effective(effective_text))


_cluster_known_hosts = as_filter(
    lambda hosts, hostvars, existing_text="", trust_fact_names=False, *, ssh_port=22:
    cluster_known_hosts(hostvars, hosts, existing_text or "", bool(trust_fact_names),
                        name_resolution.controller_addresses, ssh_port))


def _hosts_without_address(hosts, hostvars):
    return [host for host in hosts
            if not node_own_addresses(hostvars.get(host) or {}, host, name_resolution.controller_addresses)]


class FilterModule(object):
    def filters(self):
        return {
            "sshd_effective": parse_sshd_effective,
            "ssh_kexinit": parse_kexinit_probe,
            "sshd_runtime_drift": sshd_runtime_drift,
            "cluster_known_hosts": _cluster_known_hosts,
            "hosts_without_address": _hosts_without_address,
            "known_hosts_by_port": ssh_config_hosts,
            "ssh_keypair_drift": keypair_drift,
            "lockout_problems": as_filter(lockout_problems),
            "controller_address_outside": as_filter(controller_address_outside),
        }
