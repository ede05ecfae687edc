# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet.cluster.busbw_floor: the NCCL all_reduce bus bandwidth floor of a gpu_topology profile, the default of
the validate role's floors; the profiles live in module_utils/topology_policy.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils import topology_policy


def busbw_floor(profile, scope="node"):
    """The all_reduce busbw floor in GB/s of a gpu_topology profile, 0.0 when there is none."""
    return topology_policy.busbw_floor(profile, scope)


class FilterModule(object):
    def filters(self):
        return {"busbw_floor": busbw_floor}
