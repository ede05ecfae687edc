# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the nvidia_driver role uses; the logic lives in module_utils/nvidia_driver.py.

gpufleet.cluster.nvidia_driver_plan, nvidia_driver_branch_problem, nvidia_driver_upstream_version,
nvidia_driver_loaded_version, nvidia_driver_fabricmanager_spec, nvidia_driver_cuda_repo_distro and
nvidia_driver_cuda_repo_arch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver as nd


def plan(node, *, source, branch, kernel_modules="auto", fabricmanager="auto", ubuntu_modules="auto"):
    """``gpufleet_node | gpufleet.cluster.nvidia_driver_plan(source=..., branch=..., ...)``: the settings' auto
    decided for the node (module_utils/nvidia_driver.py node_driver_plan)."""
    return nd.node_driver_plan(node, source, branch, kernel_modules, fabricmanager, ubuntu_modules)


def branch_problem(branch):
    """Empty string when the branch may be asked for, else why not: module_utils/nvidia_driver.py branch_decision,
    the one place the branch is decided."""
    return nd.branch_decision(branch)["problem"]


class FilterModule(object):
    """gpufleet nvidia_driver filters."""

    def filters(self):
        return {
            "nvidia_driver_plan": as_filter(plan),
            "nvidia_driver_branch_problem": branch_problem,
            "nvidia_driver_upstream_version": nd.upstream_version,
            "nvidia_driver_loaded_version": nd.loaded_version,
            "nvidia_driver_fabricmanager_spec": as_filter(nd.fabricmanager_spec),
            "nvidia_driver_cuda_repo_distro": as_filter(nd.cuda_repo_distro),
            "nvidia_driver_cuda_repo_arch": nd.cuda_repo_arch,
        }
