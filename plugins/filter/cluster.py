# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters about the cluster's nodes; the work is done in plugin_utils/cluster.py, names are resolved by the
controller (plugin_utils/name_resolution.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.cluster import (
    group_hosts,
    node_address,
    trusted_addresses,
)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import name_resolution
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter


def cluster_node_address(host_vars, name):
    """The address other nodes reach this one on: gpufleet_cluster_address, else ansible_host, else the name."""
    return node_address(host_vars, name)


@as_filter
def cluster_trusted_addresses(hosts, hostvars, networks=None, wide_networks=None):
    """The sources every trust list uses: the hosts' own addresses (inventory, else the controller's resolution of
    their names), plus opt-in CIDRs (no wider than /16 or /48 unless wide_networks names them)."""
    return trusted_addresses(hostvars, hosts, networks or [], wide_networks or [],
                             name_resolution.controller_addresses)


@as_filter
def cluster_group_hosts(group_names, groups):
    """``cluster_groups | gpufleet.cluster.group_hosts(groups)``: the hosts of those groups, each once."""
    return group_hosts(group_names, groups)


class FilterModule(object):
    def filters(self):
        return {"group_hosts": cluster_group_hosts,
                "node_address": cluster_node_address,
                "trusted_addresses": cluster_trusted_addresses}
