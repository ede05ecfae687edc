#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpudirect_facts
short_description: Work out how a node gets GPUDirect RDMA (DMA-BUF, nvidia-peermem or none)
version_added: "0.1.0"
description:
  - Reads the running kernel release, the NVIDIA kernel module flavour (C(/proc/driver/nvidia/version)),
    whether C(/proc/kallsyms) has C(ib_register_peer_memory_client) (exported only by an MLNX_OFED/DOCA-OFED
    ib_core or a kernel with the peer-memory patch), C(ofed_info -s), whether C(nvidia_peermem) is in
    C(/proc/modules) and whether C(modinfo nvidia-peermem) finds the module, and returns them with the choice
    of C(gpufleet.cluster.gpudirect.choose_gpudirect) as the C(gpufleet_gpudirect) fact.
  - Loads nothing and changes nothing.
options:
  root:
    description:
      - Directory the procfs paths are read under. Tests point it at a recorded tree; then no command is run.
    type: path
    default: /
  gpu_count:
    description:
      - NVIDIA GPUs on the node (C(gpufleet_node.gpu_count)).
    type: int
    required: true
  hca_count:
    description:
      - RDMA HCAs selected on the node (C(gpufleet_rdma.hca_count)).
    type: int
    required: true
  preference:
    description:
      - C(auto) takes DMA-BUF where it can work, else nvidia-peermem where it can load, else none.
      - C(dmabuf) and C(peermem) fail when the node cannot do that method; C(none) turns GPUDirect RDMA off.
    type: str
    choices: [auto, dmabuf, peermem, none]
    default: auto
  kernel_release:
    description:
      - Kernel release to decide for; defaults to the running one (C(os.uname().release)).
    type: str
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
  - A node without a GPU or without an HCA gets C(method=none) whatever the preference.
"""

EXAMPLES = r"""
- name: Work out GPUDirect RDMA
  gpufleet.cluster.gpudirect_facts:
    gpu_count: "{{ gpufleet_node.gpu_count }}"
    hca_count: "{{ gpufleet_rdma.hca_count }}"
    preference: "{{ interconnect_gpudirect }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet_gpudirect:
      description: The GPUDirect RDMA method and what it was chosen from.
      type: dict
      sample:
        method: dmabuf
        load_peermem: false
        nccl_dmabuf: true
        reason: "DMA-BUF: kernel 6.12.48+deb13-amd64 (5.12 or later) and the open NVIDIA kernel modules; nvidia-peermem is not needed."
        kernel: 6.12.48+deb13-amd64
        kernel_modules: open
        peer_memory_symbols: false
        ofed: ""
        peermem_loaded: false
        peermem_available: true
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import gpudirect, sysfs


def kallsyms_has_peer_memory(path):
    """Read /proc/kallsyms one line at a time (it is several MiB); False when it cannot be read."""
    try:
        with open(path) as handle:
            return gpudirect.has_peer_memory_symbol(handle)
    except (IOError, OSError):
        return False


def gather(root, ofed_info_text="", peermem_available=False, kernel_release=None):
    """Everything the choice needs that lives under root (pure except for file reads)."""
    return {
        "kernel": kernel_release or os.uname().release,
        "kernel_modules": gpudirect.kernel_modules_flavour(
            sysfs.read_text(sysfs._path(root, "proc/driver/nvidia/version"), default="")),
        "peer_memory_symbols": kallsyms_has_peer_memory(sysfs._path(root, "proc/kallsyms")),
        "ofed": gpudirect.ofed_summary(ofed_info_text),
        "peermem_loaded": gpudirect.module_loaded(sysfs.read_text(sysfs._path(root, "proc/modules"), default="")),
        "peermem_available": bool(peermem_available),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            gpu_count=dict(type="int", required=True),
            hca_count=dict(type="int", required=True),
            preference=dict(type="str", default="auto", choices=list(gpudirect.PREFERENCES)),
            kernel_release=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    ofed_info_text = ""
    peermem_available = False
    if root == "/":
        env = {"LANGUAGE": "C", "LC_ALL": "C"}
        ofed_info = module.get_bin_path("ofed_info")
        if ofed_info:
            rc, out, err = module.run_command([ofed_info, "-s"], environ_update=env)
            ofed_info_text = out if rc == 0 else ""
        modinfo = module.get_bin_path("modinfo", opt_dirs=["/usr/sbin", "/sbin"])
        if modinfo:
            rc, out, err = module.run_command([modinfo, "-F", "filename", "nvidia-peermem"], environ_update=env)
            peermem_available = rc == 0
    facts = gather(root, ofed_info_text, peermem_available, module.params["kernel_release"])
    try:
        choice = gpudirect.choose_gpudirect(
            facts["kernel"], facts["kernel_modules"], facts["peer_memory_symbols"], facts["ofed"],
            module.params["gpu_count"], module.params["hca_count"], module.params["preference"])
    except gpudirect.GpuDirectError as exc:
        module.fail_json(msg=str(exc), gpufleet_gpudirect=facts)
    if choice["load_peermem"] and not facts["peermem_available"] and not facts["peermem_loaded"] and root == "/":
        module.fail_json(msg="nvidia-peermem is the GPUDirect RDMA method here but modinfo does not find the "
                             "nvidia-peermem module: install it with the NVIDIA driver (nvidia_driver_extra_packages).",
                         gpufleet_gpudirect=dict(facts, **choice))
    facts.update(choice)
    module.exit_json(changed=False, ansible_facts={"gpufleet_gpudirect": facts})


if __name__ == "__main__":
    main()
