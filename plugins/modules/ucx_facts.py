#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ucx_facts
short_description: Read the UCX build's version and transports and work out the node's UCX_TLS
version_added: "0.1.0"
description:
  - Runs C(ucx_info -v) (version, configure arguments) and C(ucx_info -d) (the transports and devices UCX can
    open on this node) and returns them as the C(gpufleet_ucx) fact.
  - Works out UCX_TLS from I(base_tls) plus the CUDA transports (C(cuda_copy), C(cuda_ipc), and C(gdr_copy)
    where GDRCopy is present) that C(ucx_info -d) lists, so that CUDA-aware MPI/UCX can move GPU buffers; for
    every CUDA transport not added it says why (build without CUDA, no GPU visible, no GDRCopy).
  - I(operator_tls) (an explicit UCX_TLS) wins as it stands; so does a I(base_tls) that is an exclusion list
    (C(^...)), C(all), or already names a CUDA transport.
  - Never fails because UCX is missing; without C(ucx_info) (check mode before the packages exist) the fact
    says so and UCX_TLS is I(base_tls).
options:
  ucx_info:
    description:
      - C(ucx_info) binary to run, a name looked up in C(PATH) or a full path, such as HPC-X's
        C(/opt/hpcx/ucx/bin/ucx_info) for that stack's UCX.
    type: str
    default: ucx_info
  base_tls:
    description:
      - UCX_TLS the CUDA transports are appended to (the role's C(interconnect_ucx_tls)).
    type: str
    default: "rc,ud,sm,self"
  operator_tls:
    description:
      - UCX_TLS set explicitly by the operator; used as it stands when given.
    type: str
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
"""

EXAMPLES = r"""
- name: Read UCX and work out UCX_TLS
  gpufleet.cluster.ucx_facts:

- name: Use HPC-X's UCX, keeping an operator's UCX_TLS
  gpufleet.cluster.ucx_facts:
    ucx_info: /opt/hpcx/ucx/bin/ucx_info
    base_tls: "rc,sm,self"
    operator_tls: "{{ interconnect_ucx_settings.UCX_TLS | default(omit) }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet_ucx:
      description: The UCX build, its transports and the UCX_TLS chosen.
      type: dict
      contains:
        found:
          description: C(ucx_info) ran.
          type: bool
        version:
          description: UCX library version from C(ucx_info -v); null when not read.
          type: str
          sample: "1.18.1"
        configured_with:
          description: The build's configure arguments from C(ucx_info -v).
          type: str
        built_with_cuda:
          description: C(--with-cuda) in the configure arguments (true), C(--without-cuda) (false), or neither (null).
          type: bool
        built_with_gdrcopy:
          description: The same for C(--with-gdrcopy).
          type: bool
        transports:
          description: Transports C(ucx_info -d) lists, each once.
          type: list
          elements: str
          sample: [self, tcp, sysv, posix, cuda_copy, cuda_ipc, gdr_copy, rc_verbs, rc_mlx5, ud_verbs, ud_mlx5]
        memory_domains:
          description: Memory domains C(ucx_info -d) lists.
          type: list
          elements: str
        base_tls:
          description: The I(base_tls) given.
          type: str
        tls:
          description: UCX_TLS for this node.
          type: str
          sample: "rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy"
        tls_source:
          description: C(computed) (base plus CUDA transports), C(base) (base left as it stands) or C(operator).
          type: str
        cuda_added:
          description: CUDA transports appended to the base.
          type: list
          elements: str
        cuda_available:
          description: CUDA transports C(ucx_info -d) lists.
          type: list
          elements: str
        cuda_absent:
          description: For each of cuda_copy, cuda_ipc, gdr_copy that is not listed, why.
          type: dict
          sample: {cuda_copy: "this UCX build has no CUDA support (no --with-cuda in ucx_info -v, no cuda memory domain)"}
        reason:
          description: One line on how UCX_TLS was chosen.
          type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import ucx

C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


def read_ucx_info(module, binary):
    """(found, version text, devices text, error) from running ucx_info -v and -d."""
    if "/" in binary:
        path = binary if os.access(binary, os.X_OK) else None
    else:
        path = module.get_bin_path(binary)
    if not path:
        return False, "", "", "%s not found%s" % (binary, "" if "/" in binary else " in PATH")
    rc, version_text, err = module.run_command([path, "-v"], environ_update=C_LOCALE)
    if rc != 0:
        return False, "", "", "%s -v exited %s: %s" % (path, rc, (err or version_text).strip())
    rc, devices_text, err = module.run_command([path, "-d"], environ_update=C_LOCALE)
    if rc != 0:
        return False, version_text, "", "%s -d exited %s: %s" % (path, rc, (err or devices_text).strip())
    return True, version_text, devices_text, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ucx_info=dict(type="str", default="ucx_info"),
            base_tls=dict(type="str", default=ucx.DEFAULT_TLS),
            operator_tls=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    found, version_text, devices_text, error = read_ucx_info(module, p["ucx_info"])
    facts = ucx.decide(version_text, devices_text, base_tls=p["base_tls"], operator_tls=p["operator_tls"],
                       found=found, error=error)
    module.exit_json(changed=False, ansible_facts={"gpufleet_ucx": facts})


if __name__ == "__main__":
    main()
