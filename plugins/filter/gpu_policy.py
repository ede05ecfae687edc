# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the nvidia_driver role uses for persistence mode and the GPU policy; the logic lives in
plugin_utils/gpu_policy.py.

gpufleet.cluster.gpu_policy_parse_query, gpu_policy_validate, gpu_policy_problems, gpu_policy_commands,
gpu_policy_persistence_problems and gpu_policy_persistenced_exec_start.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import gpu_policy as gp


def problems(gpus, policy, persistence_mode=None):
    """gpus | gpu_policy_problems(policy): module_utils policy_problems with the parsed query piped in."""
    return gp.policy_problems(policy, gpus, persistence_mode)


class FilterModule(object):
    """gpufleet GPU policy filters."""

    def filters(self):
        return {
            "gpu_policy_parse_query": as_filter(gp.parse_query),
            "gpu_policy_validate": gp.validate_policy,
            "gpu_policy_problems": as_filter(problems),
            "gpu_policy_commands": as_filter(gp.policy_commands),
            "gpu_policy_persistence_problems": as_filter(gp.persistence_problems),
            "gpu_policy_persistenced_exec_start": gp.persistenced_exec_start,
        }
