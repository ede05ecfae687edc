#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lynis_audit
short_description: Run a lynis system audit and return its hardening index, warnings and suggestions
version_added: "0.2.0"
description:
  - Runs C(lynis audit system) with its report and log in a private temporary directory (removed afterwards),
    so the audit leaves nothing on the node, and returns the figures of the report.
  - In a container (O(container)) the tests that look at what belongs to the host kernel or the container engine
    (kernel image, partitions, process accounting, the kernel audit, AppArmor/SELinux, and each kernel setting
    that O(sysctl_file) sets to the value the scan profile expects while the host kernel's live value differs)
    are left unscored with C(skip-test) lines in a one-run profile, each with its reason in RV(unscored). On a
    real host every test is scored.
  - Changes nothing on the node, so it runs the same in check mode.
options:
  container:
    description: Whether the node is a container; C(auto) decides as preflight's C(gpufleet_node.container) does.
    type: str
    choices: [auto, "yes", "no"]
    default: auto
  sysctl_file:
    description: The kernel settings file whose keys count as done in a container.
    type: path
    default: /etc/sysctl.d/60-gpufleet-hardening.conf
  profile:
    description: The scan profile whose C(config-data=sysctl) lines give the expected kernel values.
    type: path
    default: /etc/lynis/default.prf
  lynis:
    description: The lynis program.
    type: path
    default: /usr/sbin/lynis
  timeout:
    description: Seconds the audit may take.
    type: int
    default: 900
  proc_root:
    description: Where the live kernel settings are read. Tests point it at a directory.
    type: path
    default: /proc/sys
author:
  - gpufleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Audit the node
  gpufleet.cluster.lynis_audit:
  register: audit

- name: Fail below 85
  ansible.builtin.assert:
    that: audit.hardening_index >= 85
"""

RETURN = r"""
hardening_index:
  description: Lynis' hardening index (0-100).
  type: int
  returned: success
tests_performed:
  description: Number of tests lynis ran.
  type: int
  returned: success
lynis_version:
  description: The lynis version that ran.
  type: str
  returned: success
container:
  description: Whether the node was audited as a container.
  type: bool
  returned: success
lynis_warnings:
  description: Warnings, each C(test), C(text), C(details).
  type: list
  elements: dict
  returned: success
lynis_suggestions:
  description: Suggestions, each C(test), C(text), C(details).
  type: list
  elements: dict
  returned: success
unscored:
  description: Tests left unscored, each C(test) and C(reason); empty on a real host.
  type: list
  elements: dict
  returned: success
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.lynis import (
    live_sysctl_values, parse_report, profile_sysctl_expectations, profile_text, sysctl_file_values, unscored_tests)
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import detect_container, read_text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", choices=["auto", "yes", "no"], default="auto"),
            sysctl_file=dict(type="path", default="/etc/sysctl.d/60-gpufleet-hardening.conf"),
            profile=dict(type="path", default="/etc/lynis/default.prf"),
            lynis=dict(type="path", default="/usr/sbin/lynis"),
            timeout=dict(type="int", default=900),
            proc_root=dict(type="path", default="/proc/sys"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not os.access(params["lynis"], os.X_OK):
        module.fail_json(msg="%s is not there: install lynis (Debian's package) before the audit" % params["lynis"])
    if params["container"] == "auto":
        container = detect_container() is not None
    else:
        container = params["container"] == "yes"
    written = sysctl_file_values(read_text(params["sysctl_file"], ""))
    skipped = unscored_tests(container, profile_sysctl_expectations(read_text(params["profile"], "")), written,
                             params["sysctl_file"], live_sysctl_values(written, params["proc_root"]))
    workdir = tempfile.mkdtemp(prefix="gpufleet-lynis-")
    try:
        profile = os.path.join(workdir, "gpufleet.prf")
        with open(profile, "w") as handle:
            handle.write(profile_text(skipped))
        report_file = os.path.join(workdir, "report.dat")
        argv = ["timeout", str(params["timeout"]), params["lynis"], "audit", "system", "--quick", "--no-colors",
                "--profile", profile, "--report-file", report_file, "--logfile", os.path.join(workdir, "lynis.log")]
        rc, out, err = module.run_command(argv, environ_update={"LANG": "C", "LC_ALL": "C"})
        figures = parse_report(read_text(report_file, ""))
        if rc != 0 or figures["hardening_index"] is None:
            module.fail_json(msg="lynis gave no hardening index (rc=%d)" % rc, rc=rc,
                             stdout_tail=out[-4000:], stderr_tail=err[-4000:])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    module.exit_json(changed=False, container=container,
                     unscored=[{"test": test, "reason": reason} for test, reason in skipped], **figures)


if __name__ == "__main__":
    main()
