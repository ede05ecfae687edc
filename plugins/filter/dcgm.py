# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the gpu_monitoring role uses; the logic lives in module_utils/dcgm.py.

gpufleet.cluster.dcgm_cuda_major, dcgm_package, dcgm_cuda_repo_arch, dcgm_go_arch,
dcgm_node_exporter_tarball_url and dcgm_tarball_checksum.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils import dcgm


def _wrap(func):
    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc))
    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def cuda_major(branch, override=""):
    """``nvidia_driver_branch | gpufleet.cluster.dcgm_cuda_major(gpu_monitoring_dcgm_cuda_major)`` -> 12 or 13."""
    return dcgm.dcgm_cuda_major(override, branch)


def package(branch, override=""):
    """``nvidia_driver_branch | gpufleet.cluster.dcgm_package(override)`` -> datacenter-gpu-manager-4-cuda13."""
    return dcgm.dcgm_package(override, branch)


def cuda_repo_arch(machine, override=""):
    """``gpufleet_node.machine | gpufleet.cluster.dcgm_cuda_repo_arch(override)`` -> x86_64 or sbsa."""
    return dcgm.cuda_repo_arch(machine, override)


def tarball_url(version, machine):
    """``version | gpufleet.cluster.dcgm_node_exporter_tarball_url(gpufleet_node.machine)``."""
    return dcgm.node_exporter_tarball_url(version, machine)


def tarball_checksum(checksum, machine):
    """``checksum (str or {amd64:, arm64:}) | gpufleet.cluster.dcgm_tarball_checksum(gpufleet_node.machine)``."""
    return dcgm.tarball_checksum(checksum, machine)


class FilterModule(object):
    """gpufleet DCGM and exporter-architecture filters."""

    def filters(self):
        return {
            "dcgm_cuda_major": _wrap(cuda_major),
            "dcgm_package": _wrap(package),
            "dcgm_cuda_repo_arch": _wrap(cuda_repo_arch),
            "dcgm_go_arch": _wrap(dcgm.go_arch),
            "dcgm_node_exporter_tarball_url": _wrap(tarball_url),
            "dcgm_tarball_checksum": _wrap(tarball_checksum),
        }
