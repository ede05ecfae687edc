# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the gpu_monitoring role uses; the logic lives in plugin_utils/dcgm.py.

gpufleet.cluster.dcgm_cuda_major, dcgm_go_arch, dcgm_node_exporter_tarball_url and dcgm_tarball_checksum.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import dcgm


def cuda_major(branch, override=""):
    """``nvidia_driver_branch | gpufleet.cluster.dcgm_cuda_major(gpu_monitoring_dcgm_cuda_major)`` -> 12 or 13."""
    return dcgm.dcgm_cuda_major(override, branch)


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
            "dcgm_cuda_major": as_filter(cuda_major),
            "dcgm_go_arch": as_filter(dcgm.go_arch),
            "dcgm_node_exporter_tarball_url": as_filter(tarball_url),
            "dcgm_tarball_checksum": as_filter(tarball_checksum),
        }
