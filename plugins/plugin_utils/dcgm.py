# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure policy for DCGM in the gpu_monitoring role: which CUDA build of DCGM 4 a driver branch needs, and the
per-architecture names of what gpu_monitoring downloads.

No Ansible import here: the filter plugin ``gpufleet.cluster.dcgm`` exposes these functions to the role, and
``tests/unit/test_dcgm*.py`` and ``tests/unit/test_platform_matrix.py`` call them directly.

DCGM 4 is split per CUDA major: datacenter-gpu-manager-4-cuda11, -cuda12, -cuda13. NVIDIA's install guide
(https://docs.nvidia.com/datacenter/dcgm/latest/installation.html, "Install DCGM") picks the package from the
CUDA version the installed driver reports (``nvidia-smi -q``: "CUDA Version"), i.e. from the driver branch.
The driver floor of each CUDA major is in the CUDA toolkit release notes, table "CUDA Toolkit and Corresponding
Driver Versions" (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/): CUDA 13.0 needs 580 or newer,
CUDA 12.0 needs 525 or newer, CUDA 11.0 needs 450 or newer. So 580+ -> cuda13; 525 (535/550/570 LTS/PB
branches gpufleet allows) -> cuda12; 450-524 -> cuda11 (below gpufleet's own floor of 535, kept for the table).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver

# (first driver branch, CUDA major its driver reports), newest first.
CUDA_MAJOR_BY_BRANCH = ((580, 13), (525, 12), (450, 11))
DCGM_CUDA_MAJORS = (11, 12, 13)

# Kernel machine name (uname -m, gpufleet_node.machine) -> the architecture in Prometheus' release tarball names
# (node_exporter-<v>.linux-<arch>.tar.gz).
GO_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def driver_branch_number(branch):
    """The branch number of '580', 580, 'R580', '580.95.05' or '570-server' (module_utils/nvidia_driver.py reads it);
    ValueError otherwise."""
    number = nvidia_driver.driver_branch(branch)
    if number is None:
        raise ValueError("not an NVIDIA driver branch: %r (expected e.g. '580' or '570.172.08')" % (branch,))
    return number


def cuda_major_for_branch(branch):
    """CUDA major a driver branch reports, hence the DCGM 4 build it needs (580 -> 13, 570 -> 12)."""
    number = driver_branch_number(branch)
    for first, major in CUDA_MAJOR_BY_BRANCH:
        if number >= first:
            return major
    raise ValueError(
        "driver branch %s is older than any DCGM 4 build supports (DCGM 4 needs CUDA 11, i.e. branch 450 or newer)"
        % number)


def dcgm_cuda_major(override, branch):
    """The CUDA major of the DCGM package: ``override`` when set (11, 12, 13, '13'), else from the driver branch."""
    if override not in (None, "", "auto"):
        try:
            major = int(str(override).strip())
        except ValueError:
            raise ValueError("gpu_monitoring_dcgm_cuda_major must be empty or one of %s, got %r"
                             % ("/".join(str(m) for m in DCGM_CUDA_MAJORS), override))
        if major not in DCGM_CUDA_MAJORS:
            raise ValueError("DCGM 4 has no build for CUDA %s (builds: %s)"
                             % (major, ", ".join(str(m) for m in DCGM_CUDA_MAJORS)))
        return major
    return cuda_major_for_branch(branch)


def go_arch(machine):
    """Architecture of a Go release tarball (Prometheus exporters): x86_64 -> amd64, aarch64 -> arm64."""
    try:
        return GO_ARCH[str(machine)]
    except KeyError:
        raise ValueError("no release tarball architecture for machine %r (x86_64 or aarch64)" % (machine,))


def node_exporter_tarball_url(version, machine, base_url="https://github.com/prometheus/node_exporter/releases/download"):
    """Prometheus' release tarball of node_exporter ``version`` for the node's architecture."""
    version = str(version).lstrip("v")
    if not re.match(r"^\d+\.\d+\.\d+$", version):
        raise ValueError("node_exporter version must read like 1.9.1, got %r" % (version,))
    return "%s/v%s/node_exporter-%s.linux-%s.tar.gz" % (base_url.rstrip("/"), version, version, go_arch(machine))


def tarball_checksum(checksum, machine):
    """The sha256 for this node's tarball: a string applies to every architecture, a dict is keyed by the tarball
    architecture (amd64, arm64). Empty string when none is given for this architecture."""
    if isinstance(checksum, dict):
        value = checksum.get(go_arch(machine)) or ""
    else:
        value = checksum or ""
    return re.sub(r"^sha256:", "", str(value).strip())
