#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_state
short_description: Read the NVIDIA driver state of a node and plan what the nvidia_driver role changes, in one call
version_added: "0.3.0"
description:
  - Reads the installed packages (C(/var/lib/dpkg/status) or C(rpm -qa)), the holds, the candidate version
    (C(apt-cache policy)), the loaded kernel module (C(/proc/driver/nvidia/version)), the running and installed
    kernels, which of them have the NVIDIA module of the installed driver (C(modinfo -k)), C(dkms status), the
    driver's service units, where nvidia-persistenced's unit and binary are, and the machine id, and returns the
    plan of the run (what to install, hold, build) with the problems that must stop it.
  - With O(build_missing), runs C(dkms autoinstall -k) for every installed kernel that has its headers but no
    module of the installed driver (a kernel that arrived with an update), so the next boot loads the driver.
    That is the only change it makes; in check mode it only reports the kernels it would build for.
  - With O(refresh), refreshes the apt lists first (C(apt-get update)) when the sources changed or a package
    must be installed and the lists are older than an hour; never in check mode.
options:
  plan:
    description: The role's package plan (C(gpufleet.cluster.nvidia_driver_plan) filter output).
    type: dict
    required: true
  source:
    description: Where the driver comes from (debian, ubuntu, cuda), for the messages.
    type: str
    required: true
  branch:
    description: The driver branch asked for.
    type: str
    required: true
  extra_packages:
    description: Extra packages installed and held with the driver.
    type: list
    elements: str
    default: []
  upgrade:
    description: Move to the newest packages of the branch.
    type: bool
    default: false
  headers:
    description: Install the kernel headers DKMS needs (running kernel and the metapackage that follows updates).
    type: bool
    default: true
  sources_changed:
    description: The package sources changed in this run (refresh the lists; in check mode nothing is known yet).
    type: bool
    default: false
  refresh:
    description: Refresh the apt lists when needed (see description).
    type: bool
    default: true
  build_missing:
    description: Build the module with DKMS for installed kernels that lack it (not in containers, not in check mode).
    type: bool
    default: false
  gpu_count:
    description: NVIDIA GPUs on the node (no GPU, no reboot is ever pending).
    type: int
    default: 0
  container:
    description: The node is a container (kernel work is skipped with the reason).
    type: bool
    default: false
  os_family:
    description: Debian or RedHat.
    type: str
    required: true
  os_id:
    description: debian, ubuntu, rhel, rocky.
    type: str
    required: true
  gpu_policy_unit:
    description:
      - Path of the GPU policy unit the role writes. The result says whether it exists, so a node without a policy
        needs no second call to find one left from an earlier policy. Empty skips that read.
    type: path
    default: ""
  root:
    description: Directory the files are read under (tests point it at a recorded tree).
    type: path
    default: /
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode (it then builds and refreshes nothing).
"""

EXAMPLES = r"""
- name: Read the driver state and plan the run
  gpufleet.cluster.nvidia_driver_state:
    plan: "{{ nvidia_driver_plan }}"
    source: debian
    branch: "580"
    gpu_count: "{{ gpufleet_node.gpu_count }}"
    container: "{{ gpufleet_node.container }}"
    os_family: "{{ gpufleet_node.os.family }}"
    os_id: "{{ gpufleet_node.os.id }}"
  register: nvidia_driver_state
"""

RETURN = r"""
state:
  description: What the node has and what the run must do.
  returned: always
  type: dict
  contains:
    installed_version: {description: "Installed driver package version, or empty.", type: str}
    candidate_version: {description: "Version apt would install, or empty.", type: str}
    driver_changing: {description: A driver package is missing or an upgrade was asked for., type: bool}
    branch:
      description: >-
        The branch decisions of the run (module_utils/nvidia_driver.py C(branch_decision)): C(requested),
        C(installed) (the installed driver's branch, or null), C(matches) (it is the requested one), C(change)
        (a driver of another branch is installed), C(offered) (the branch the run leaves installed), and the
        sentences C(problem), C(offered_problem) and C(note) (empty when there is nothing to say).
      type: dict
    install: {description: "Package specs to install in one transaction (driver, fabric, headers).", type: list}
    pin_install: {description: Branch pinning packages to install before the driver., type: list}
    headers: {description: Header packages this node needs., type: list}
    hold: {description: Installed packages of the driver stack to hold., type: list}
    held: {description: Those already held., type: list}
    hold_todo: {description: Those not held yet., type: list}
    loaded_version: {description: "Version of the loaded kernel module, or empty.", type: str}
    reboot_pending: {description: A GPU node runs another module than the installed driver., type: bool}
    reboot_reason: {description: Why a reboot is pending., type: str}
    kernel: {description: "Running/installed kernels, module per kernel, status ok/missing/skipped and reason.",
             type: dict}
    units: {description: The driver's systemd units present on the node., type: list}
    persistenced:
      description: >-
        Where nvidia-persistenced is: C(unit_file) (the first of /etc/systemd/system, /usr/lib/systemd/system and
        /lib/systemd/system that is not masked, or empty), C(unit_text) (its text), C(binary) (/usr/bin or
        /usr/sbin, or empty) and C(masked) (the unit paths linked to /dev/null).
      type: dict
    machine_id: {description: /etc/machine-id of the node., type: str}
    gpu_policy_unit_exists: {description: "O(gpu_policy_unit) exists (false when O(gpu_policy_unit) is empty).",
                             type: bool}
    problems: {description: Sentences that must stop the run before anything changes., type: list}
    notes: {description: Warnings for the operator., type: list}
    built: {description: Kernels the module was built for in this call., type: list}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import driver_state as ds
from ansible_collections.gpufleet.cluster.plugins.module_utils import sysfs

UNITS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-imex.service")
UNIT_DIRS = ("etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")
C_ENV = {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}


def _path(root, rel):
    return os.path.join(root, rel)


def installed_packages(module, root, family):
    if family == "RedHat":
        rpm = module.get_bin_path("rpm")
        if not rpm:
            return {}
        _unused, out, _unused = module.run_command([rpm, "-qa", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"],
                                                   environ_update=C_ENV)
        locked = sysfs.read_text(_path(root, "etc/dnf/plugins/versionlock.list"), default="")
        return ds.parse_rpm_list(out, locked)
    return ds.parse_dpkg_status(sysfs.read_text(_path(root, "var/lib/dpkg/status"), default=""))


def lists_age(root):
    """Seconds since apt's lists were last refreshed (inf when never)."""
    stamps = [_path(root, "var/lib/apt/periodic/update-success-stamp"), _path(root, "var/lib/apt/lists")]
    times = [os.stat(p).st_mtime for p in stamps if os.path.exists(p)]
    return time.time() - max(times) if times else float("inf")


def kernels(module, root, container, want_modules):
    """Running and installed kernels, whether each has headers and the version of its NVIDIA module."""
    if root == "/":
        running = os.uname().release
    else:
        running = (sysfs.read_text(_path(root, "proc/sys/kernel/osrelease")) or "").strip()
    moddir = _path(root, "lib/modules")
    installed = []
    if os.path.isdir(moddir):
        for name in sorted(os.listdir(moddir)):
            if os.path.exists(_path(root, "boot/vmlinuz-" + name)) or os.path.exists(os.path.join(moddir, name, "vmlinuz")):
                installed.append(name)
    if running and running not in installed and not container:
        installed.append(running)
    headers = {k: os.path.exists(os.path.join(moddir, k, "build")) for k in installed}
    modules = {}
    modinfo = module.get_bin_path("modinfo") if want_modules and not container and root == "/" else None
    for release in installed if modinfo else []:
        modules[release] = ""
        for name in ds.MODULE_NAMES:
            rc, out, _unused = module.run_command([modinfo, "-k", release, "-F", "version", name], environ_update=C_ENV)
            if rc == 0 and out.strip():
                modules[release] = out.strip().splitlines()[0]
                break
    dkms = module.get_bin_path("dkms") if not container and root == "/" else None
    entries = []
    if dkms:
        _unused, out, _unused = module.run_command([dkms, "status"], environ_update=C_ENV)
        entries = ds.parse_dkms_status(out)
    return {"running": running, "installed": installed, "headers": headers, "modules": modules, "dkms": entries}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            plan=dict(type="dict", required=True),
            source=dict(type="str", required=True),
            branch=dict(type="str", required=True),
            extra_packages=dict(type="list", elements="str", default=[]),
            upgrade=dict(type="bool", default=False),
            headers=dict(type="bool", default=True),
            sources_changed=dict(type="bool", default=False),
            refresh=dict(type="bool", default=True),
            build_missing=dict(type="bool", default=False),
            gpu_count=dict(type="int", default=0),
            container=dict(type="bool", default=False),
            os_family=dict(type="str", required=True),
            os_id=dict(type="str", required=True),
            gpu_policy_unit=dict(type="path", default=""),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    root, plan, family = p["root"], p["plan"], p["os_family"]
    for key in ("packages", "version_package", "package_manager"):
        if key not in plan:
            module.fail_json(msg="plan lacks %r: pass the nvidia_driver_plan filter's output" % key)
    changed = False
    packages = installed_packages(module, root, family)
    kernel = kernels(module, root, p["container"], want_modules=True)
    options = dict(extra=p["extra_packages"], upgrade=p["upgrade"], headers=p["headers"], gpu_count=p["gpu_count"],
                   container=p["container"], branch=p["branch"], source=p["source"], check_mode=module.check_mode,
                   sources_changed=p["sources_changed"], os_family=family, os_id=p["os_id"])
    apt_cache = module.get_bin_path("apt-cache") if plan["package_manager"] == "apt" else None

    def policy_for(state_guess):
        if not apt_cache:
            return {}
        names = [plan["version_package"]] + ["linux-headers-%s" % kernel["running"]] * bool(state_guess["headers"])
        _unused, out, _unused = module.run_command([apt_cache, "policy"] + names, environ_update=C_ENV)
        return ds.parse_apt_policy(out)

    loaded_text = sysfs.read_text(_path(root, "proc/driver/nvidia/version"), default="")
    state = ds.decide(plan, packages, {}, loaded_text, kernel, options)
    if apt_cache and p["refresh"] and not module.check_mode and (
            p["sources_changed"] or ((state["missing"] or p["upgrade"]) and lists_age(root) > 3600)):
        apt_get = module.get_bin_path("apt-get", required=True)
        rc, out, err = module.run_command([apt_get, "update", "-q"], environ_update=C_ENV)
        if rc != 0:
            module.fail_json(msg="apt-get update failed: %s" % (err or out).strip()[-2000:])
    state = ds.decide(plan, packages, policy_for(state), loaded_text, kernel, options)

    built = []
    if p["build_missing"] and state["kernel"]["rebuild"] and not module.check_mode:
        dkms = module.get_bin_path("dkms")
        if dkms:
            for release in state["kernel"]["rebuild"]:
                rc, out, err = module.run_command([dkms, "autoinstall", "-k", release], environ_update=C_ENV)
                if rc != 0:
                    module.fail_json(msg="dkms autoinstall -k %s failed: %s" % (release, (err or out).strip()[-2000:]))
                built.append(release)
            changed = True
            kernel = kernels(module, root, p["container"], want_modules=True)
            state = ds.decide(plan, packages, policy_for(state), loaded_text, kernel, options)
    elif p["build_missing"] and state["kernel"]["rebuild"]:
        changed = True  # check mode: these kernels would get the module built
    state["built"] = built
    state["units"] = [u for u in UNITS if any(os.path.exists(_path(root, os.path.join(d, u))) for d in UNIT_DIRS)]
    state["machine_id"] = (sysfs.read_text(_path(root, "etc/machine-id"), default="") or "").strip()
    state["persistenced"] = ds.persistenced(root)
    state["gpu_policy_unit_exists"] = bool(p["gpu_policy_unit"]) and os.path.lexists(_path(root, p["gpu_policy_unit"].lstrip("/")))
    for note in state["notes"]:
        module.warn(note)
    module.exit_json(changed=changed, state=state)


if __name__ == "__main__":
    main()
