# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters that turn the validate role's registered check results into step verdicts; the logic lives in
plugin_utils/verdicts.py.

gpufleet.cluster.topology_verdict, pcie_verdict, fabric_verdict, image_verdict, dcgm_diag_verdict,
sshd_audit_verdict and exporters_verdict. Each returns
{"status": "passed"|"failed"|"skipped", "reason": ..., "detail": {...}}:

    validate_topology | gpufleet.cluster.topology_verdict
    gpufleet_node | gpufleet.cluster.pcie_verdict(enabled=validate_pcie_check)
    validate_fabric | gpufleet.cluster.fabric_verdict(validate_gpudirect, validate_fabric_expect)
    validate_signed | gpufleet.cluster.image_verdict(image=..., key_configured=..., record=...)
    validate_dcgm_diag | gpufleet.cluster.dcgm_diag_verdict(enabled=..., gpu_count=..., dcgmi_installed=...)
    validate_ssh_audit_remote | gpufleet.cluster.sshd_audit_verdict(local, enabled)
    validate_node_exporter | gpufleet.cluster.exporters_verdict(dcgm_exporter)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.gpufleet.cluster.plugins.plugin_utils import verdicts as vd


class FilterModule(object):
    """gpufleet validate verdict filters."""

    def filters(self):
        return {
            "topology_verdict": vd.topology_verdict,
            "pcie_verdict": vd.pcie_verdict,
            "fabric_verdict": vd.fabric_verdict,
            "image_verdict": vd.image_verdict,
            "dcgm_diag_verdict": vd.dcgm_diag_verdict,
            "sshd_audit_verdict": vd.sshd_audit_verdict,
            "exporters_verdict": vd.exporters_verdict,
        }
