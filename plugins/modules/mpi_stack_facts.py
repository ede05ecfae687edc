#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mpi_stack_facts
short_description: Ask the node's MPI/UCX stack where it reads its configuration, and its versions, in one call
version_added: "0.1.0"
description:
  - Works out where the chosen stack's tools are (for C(doca), the newest C(/usr/mpi/gcc/openmpi-*) directory
    DOCA-OFED installed) and the environment they need, then asks the stack itself, with that environment and
    the C locale, C(ompi_info --version), C(ompi_info --path sysconfdir --parsable) and C(ucx_info -v), and
    whether the directory UCX was configured with exists. From these it returns where Open MPI reads its MCA
    parameter files and where UCX reads C(ucx.conf) (see C(plugins/module_utils/mpi_stack.py)).
  - One module call instead of a find, three commands and a stat, on every run.
  - Fails, naming each command that did not run, its exit status, its error and the environment, when the stack's
    C(ompi_info) or C(ucx_info) does not run. In check mode it does not fail on that, since this run may install
    the stack; the result then says the stack is not usable and why, and the OS directories stand in.
options:
  stack:
    description: The stack users get (the role's C(interconnect_stack)).
    type: str
    required: true
    choices: [os, doca, hpcx]
  hpcx_dir:
    description: Where HPC-X is unpacked (C(hpcx) only).
    type: path
    default: /opt/hpcx
  doca_root:
    description: Where DOCA-OFED installs its Open MPI directories (C(doca) only).
    type: path
    default: /usr/mpi/gcc
  default_path:
    description: The PATH the stack's bin directories are put in front of.
    type: str
    default: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  os_sysconfdir:
    description: Where the distribution's Open MPI reads its MCA files; stands in when the stack cannot be asked.
    type: path
    required: true
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
"""

EXAMPLES = r"""
- name: Ask the stack where it reads its configuration, and its versions
  gpufleet.cluster.mpi_stack_facts:
    stack: hpcx
    hpcx_dir: /opt/hpcx
    os_sysconfdir: /etc/openmpi
  register: mpi_stack
"""

RETURN = r"""
layout:
  description: The stack's C(bin_dirs), C(lib_dirs), C(ompi_info), C(ucx_info), C(mpi_home), C(opal_prefix), C(ucx_lib_dir).
  returned: always
  type: dict
environment:
  description: The environment the stack's commands need (empty for the C(os) stack).
  returned: always
  type: dict
usable:
  description: Both C(ompi_info) and C(ucx_info) ran (false only in check mode; otherwise the module fails).
  returned: always
  type: bool
problem:
  description: Why the stack could not be asked, or empty.
  returned: always
  type: str
openmpi:
  description: The Open MPI version C(ompi_info --version) printed, or null.
  returned: always
  type: str
ucx:
  description: The UCX version C(ucx_info -v) printed, or null.
  returned: always
  type: str
sysconfdir:
  description: Where the stack's Open MPI reads its MCA parameter files (O(os_sysconfdir) when it cannot be asked).
  returned: always
  type: str
ucx_confdir:
  description: The directory the stack's UCX reads C(ucx.conf) from (C(/etc/ucx) when it cannot be asked).
  returned: always
  type: str
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import mpi_stack

C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


def ask(module, binary, args, env):
    """(rc or None, stdout, error text) of ``binary args`` with the stack's environment."""
    path_env = env.get("PATH", os.environ.get("PATH", ""))
    if "/" in binary:
        found = binary if os.access(binary, os.X_OK) else None
    else:
        found = next((os.path.join(d, binary) for d in path_env.split(":")
                      if d and os.access(os.path.join(d, binary), os.X_OK)), None)
    if not found:
        return None, "", "%s not found%s" % (binary, "" if "/" in binary else " in PATH")
    rc, out, err = module.run_command([found] + args, environ_update=dict(env, **C_LOCALE))
    return rc, out, (err or out).strip()


def describe(binary, rc, error):
    return "%s failed (rc %s): %s" % (binary, "none" if rc is None else rc, error[:300])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            stack=dict(type="str", required=True, choices=list(mpi_stack.STACKS)),
            hpcx_dir=dict(type="path", default="/opt/hpcx"),
            doca_root=dict(type="path", default="/usr/mpi/gcc"),
            default_path=dict(type="str", default="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            os_sysconfdir=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    stack = p["stack"]
    doca_dirs = sorted(d for d in glob.glob(os.path.join(p["doca_root"], "openmpi-*")) if os.path.isdir(d))
    # Check mode on a node where DOCA-OFED is not installed yet: nothing to find, the os layout stands in.
    pending = stack == "doca" and not doca_dirs and module.check_mode
    try:
        layout = mpi_stack.stack_layout("os" if pending else stack, p["hpcx_dir"], doca_dirs)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    env = mpi_stack.stack_env(layout, p["default_path"])

    version_rc, version_out, version_err = ask(module, layout["ompi_info"], ["--version"], env)
    path_rc, path_out, path_err = ask(module, layout["ompi_info"], ["--path", "sysconfdir", "--parsable"], env)
    ucx_rc, ucx_out, ucx_err = ask(module, layout["ucx_info"], ["-v"], env)
    ompi_ok = version_rc == 0 and path_rc == 0
    problems = []
    if not ompi_ok:
        problems.append(describe(layout["ompi_info"], path_rc if version_rc == 0 else version_rc,
                                 path_err if version_rc == 0 else version_err))
    if ucx_rc != 0:
        problems.append(describe(layout["ucx_info"], ucx_rc, ucx_err))
    result = dict(changed=False, layout=layout, environment=env, usable=not problems, problem="; ".join(problems),
                  openmpi=None, ucx=None, sysconfdir=p["os_sysconfdir"], ucx_confdir="/etc/ucx")
    if problems and not module.check_mode:
        module.fail_json(msg="the %s stack is not usable: %s; environment %s" % (stack, result["problem"], env),
                         **{k: v for k, v in result.items() if k != "changed"})
    try:
        if ompi_ok:
            result["openmpi"] = mpi_stack.ompi_version(version_out)
            result["sysconfdir"] = mpi_stack.ompi_path(path_out)
        if ucx_rc == 0:
            build = mpi_stack.ucx_build(ucx_out)
            result["ucx"] = build["version"]
            configured = build.get("sysconfdir")
            result["ucx_confdir"] = mpi_stack.ucx_config_dir(ucx_out, bool(configured) and os.path.isdir(configured),
                                                             layout["ucx_lib_dir"])
    except ValueError as exc:
        module.fail_json(msg="the %s stack answered in a way gpufleet cannot read: %s" % (stack, exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
