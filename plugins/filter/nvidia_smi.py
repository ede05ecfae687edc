# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters over nvidia-smi output; the logic lives in module_utils/nvidia_smi.py.

gpufleet.cluster.gpu_compute_apps (the processes of ``--query-compute-apps``) and gpu_compute_apps_summary
(one line per process for a message).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi


def gpu_compute_apps(csv_text, fields="pid,process_name,used_memory"):
    """The processes of ``nvidia-smi --query-compute-apps=<fields>``; ``fields`` as given on the command line."""
    if isinstance(fields, str):
        fields = [field for field in fields.split(",") if field.strip()]
    return nvidia_smi.parse_compute_apps(csv_text, fields)


class FilterModule(object):
    """gpufleet nvidia-smi filters."""

    def filters(self):
        return {
            "gpu_compute_apps": as_filter(gpu_compute_apps, "nvidia-smi --query-compute-apps: "),
            "gpu_compute_apps_summary": nvidia_smi.compute_apps_summary,
        }
