# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters that read NCCL_DEBUG=INFO output and the busbw floors; the logic lives in plugin_utils/nccl.py
and module_utils/topology_policy.py.

gpufleet.cluster.nccl_debug, nccl_transport_problems, nccl_transport_summary and busbw_floor.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import nccl
from ansible_collections.gpufleet.cluster.plugins.module_utils import topology_policy


def nccl_debug(text):
    """The transports NCCL chose, read from NCCL_DEBUG=INFO output (see plugin_utils/nccl.py)."""
    return nccl.parse_nccl_debug(text)


@as_filter
def nccl_transport_problems(parsed, active_rdma_ports=0, multi_node=False):
    """One sentence per transport problem in a nccl_debug result; empty when there is none."""
    return nccl.transport_problems(parsed, active_rdma_ports, multi_node)


def nccl_transport_summary(parsed):
    """A one-line summary of a nccl_debug result."""
    return nccl.transport_summary(parsed)


def busbw_floor(profile, scope="node"):
    """The all_reduce busbw floor in GB/s of a gpu_topology profile, 0.0 when there is none."""
    return topology_policy.busbw_floor(profile, scope)


class FilterModule(object):
    def filters(self):
        return {
            "nccl_debug": nccl_debug,
            "nccl_transport_problems": nccl_transport_problems,
            "nccl_transport_summary": nccl_transport_summary,
            "busbw_floor": busbw_floor,
        }
