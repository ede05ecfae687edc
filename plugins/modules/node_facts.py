#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_facts
short_description: Detect what a GPU node is made of, from os-release and sysfs
version_added: "0.1.0"
description:
  - Reads C(/etc/os-release), NVIDIA PCI devices (vendor C(0x10de)) from C(/sys/bus/pci/devices),
    InfiniBand/RoCE HCAs from C(/sys/class/infiniband), the Secure Boot state and whether the host is a
    container, and returns them as the C(gpufleet_node) fact.
  - The fact's C(pcie) lists the PCIe link of every NVIDIA GPU and Mellanox/NVIDIA NIC (vendor C(0x15b3), Ethernet
    or InfiniBand class) as the kernel reports it in C(/sys/bus/pci/devices/<address>), that is the speed and width
    it trained to (C(current_link_speed), C(current_link_width)) and the ones it can do (C(max_link_speed),
    C(max_link_width)). Virtual functions are left out, as their physical function carries the link.
  - With O(packages) it also reads the installed packages in the same call and returns them as RV(packages), in
    the shape M(ansible.builtin.package_facts) gives, but never as a fact (so a fact cache never keeps them for a
    later run).
  - Changes nothing; needs no NVIDIA software on the node.
options:
  root:
    description:
      - Directory the sysfs and procfs paths are read under. Tests point it at a recorded tree.
    type: path
    default: /
  os_release_path:
    description:
      - The os-release file to read. Defaults to C(<root>/etc/os-release).
    type: path
  use_mokutil:
    description:
      - Ask C(mokutil --sb-state) for the Secure Boot state when the tool exists, before reading efivars.
    type: bool
    default: true
  packages:
    description:
      - Also read the installed packages and return them as RV(packages).
      - Where C(<root>/var/lib/dpkg/status) exists it is parsed (a package counts when its Status ends in
        C(installed), held ones included); otherwise C(rpm -qa) is asked (with C(--root) when O(root) is not C(/)).
      - Without either, RV(packages) is null and a warning says so.
      - Where apt keeps package lists, RV(package_lists_age) comes back too.
    type: bool
    default: false
  present:
    description:
      - Absolute paths (under O(root)) to look for in the same call; the ones that exist, a dangling link
        included, come back as RV(present). A role then runs a clean-up only where there is something to clean.
    type: list
    elements: path
    default: []
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
"""

EXAMPLES = r"""
- name: Detect the node
  gpufleet.cluster.node_facts:

- name: Detect the node and read its installed packages in the same call
  gpufleet.cluster.node_facts:
    packages: true
  register: node

- name: Read a recorded tree
  gpufleet.cluster.node_facts:
    root: /srv/recorded/dgx-h100
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet_node:
      description: What the node is made of.
      type: dict
      sample:
        os: {id: debian, version_id: "13", major: "13", codename: trixie, family: Debian,
             pretty_name: "Debian GNU/Linux 13 (trixie)"}
        nvidia_gpus: [{bdf: "0000:19:00.0", device: "0x2330", class: "0x030200", numa_node: 0, driver: nvidia}]
        gpu_count: 8
        gpus_turing_or_newer: true
        nvswitch: true
        nvswitch_count: 4
        nvlink_fabric: nvswitch
        imex: false
        hcas: [{name: mlx5_0, pci_address: "0000:1a:00.0", numa_node: 0, netdevs: [ibp26s0],
                ports: [{port: 1, state: ACTIVE, rate_gbps: 400.0, link_layer: InfiniBand}]}]
        hca_count: 8
        pcie: [{address: "0000:19:00.0", kind: GPU, class: 3D controller, class_id: "0302", vendor_id: "10de",
                device_id: "2330", driver: nvidia, description: null, revision: null, acs_cap: null, acs_ctl: null,
                link_cap: {speed_gts: 32.0, width: 16, speed_marker: null, width_marker: null},
                link_status: {speed_gts: 2.5, width: 16, speed_marker: null, width_marker: null}}]
        secure_boot: disabled
        container: false
        virtualization: metal
        machine: x86_64
        kernel: 6.12.48+deb13-amd64
packages:
  description:
    - The installed packages as M(ansible.builtin.package_facts) gives them (a dict of lists of entries by name);
      a package of a foreign dpkg architecture is listed as C(name:arch). dpkg entries have C(source=apt), rpm
      entries C(source=rpm) with C(release) and C(epoch) (null where rpm has none). Null when neither dpkg nor rpm
      was found.
    - Not a fact; register the result to use it.
  returned: when packages is true
  type: dict
  sample:
    openssh-server: [{name: openssh-server, version: "1:10.0p1-7+deb13u4", arch: amd64, source: apt}]
    "gcc-14-base:i386": [{name: "gcc-14-base:i386", version: 14.2.0-19, arch: i386, source: apt}]
package_lists_age:
  description:
    - Seconds since apt last refreshed its package lists, by the node's clock, read where
      M(ansible.builtin.apt)'s O(ansible.builtin.apt#module:cache_valid_time) reads it (the mtime of
      C(/var/lib/apt/periodic/update-success-stamp), else of C(/var/lib/apt/lists)). A task can then skip a list
      refresh apt would not do, without a module run of its own.
    - Null where there is no dpkg database or neither path exists. Not a fact, as it holds at the time of the call.
  returned: when packages is true
  type: int
  sample: 1200
ssh_session:
  description:
    - The SSH session this module runs under, as the node sees it (module_utils/ssh_session), that is the
      controller's address and source port, the address and port sshd accepted the connection on, and the account
      Ansible logs in as (the one it becomes root from) with the names of its groups (primary and supplementary, as
      sshd's C(AllowGroups) reads them). Read from the environment of the login shell sshd started, the nearest
      ancestor of the module that has C(SSH_CONNECTION). The roles keep the operator from locking Ansible out with
      it.
    - Null when the connection is not SSH (docker exec, a local connection) or O(root) is not C(/). Not a fact, as
      it belongs to this run's connection, not to the node.
  returned: always
  type: dict
  sample:
    client_address: 10.0.0.5
    client_port: 51234
    server_address: 10.0.0.11
    server_port: 22
    uid: 1001
    user: admin
    groups: [admin, adm]
present:
  description:
    - The paths of O(present) that exist on the node (a dangling link counts), in the order given. Not a fact,
      as it holds at the time of the call.
  returned: always
  type: list
  elements: str
  sample: [/usr/local/libexec/gpufleet]
apt_state:
  description:
    - The SHA-256 of what decides which packages an upgrade would install, that is the size, modification time and
      inode of dpkg's status file, of each file in C(/var/lib/dpkg/updates) and C(/var/lib/apt/lists) and of each
      file under C(/etc/apt) (sources, pins, configuration), with their paths. Any install, removal, list refresh
      or apt setting changed gives another value; the same value means apt would answer as before. The
      os_hardening role skips its upgrade simulation on a node whose value is the one it last checked and found no
      security update pending for.
    - Null where there is no dpkg database, or one of those could not be read.
  returned: when packages is true
  type: str
  sample: 0f3c1e6b2a9d4c7e8f5a1b3c9d2e4f6a8b0c1d3e5f7a9b2c4d6e8f0a1b3c5d7e
"""

import hashlib
import io
import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import installed_packages, pcie_health, sysfs
from ansible_collections.gpufleet.cluster.plugins.module_utils.ssh_session import ssh_session


def gather(root, os_release_path, mokutil_output=None, uname=None):
    """Collect the gpufleet_node dict (pure except for file reads under root).

    ``uname`` is ``os.uname()`` of the node (tests pass a tuple-like with .machine and .release).
    """
    uname = uname or os.uname()
    os_release = sysfs.parse_os_release(sysfs.read_text(os_release_path, default=""))
    summary = sysfs.os_summary(os_release)
    # One walk of the PCI devices: the NVIDIA ones for the GPUs and NVSwitches, all of them for the PCIe links.
    devices = sysfs.read_pci_devices(root, PCIE_VENDORS)
    gpus, switches, turing = sysfs.classify_nvidia([d for d in devices if d["vendor"] == sysfs.NVIDIA_VENDOR])
    hcas = sysfs.read_infiniband(root)
    if mokutil_output is not None and sysfs.secure_boot_from_mokutil(mokutil_output) != "unknown":
        secure_boot = sysfs.secure_boot_from_mokutil(mokutil_output)
    else:
        secure_boot = sysfs.secure_boot_from_efivars(root)
    container = sysfs.detect_container(root)
    fabric = sysfs.nvlink_fabric(gpus, switches)
    return {
        "os": summary,
        "os_supported": sysfs.os_support_problem(summary) is None,
        "os_problem": sysfs.os_support_problem(summary),
        "nvidia_gpus": gpus,
        "gpu_count": len(gpus),
        "gpus_turing_or_newer": turing,
        "nvswitch": bool(switches),
        "nvswitch_count": len(switches),
        # NVLink fabric that needs the fabric manager: nvswitch, nvlink5 (Blackwell: switches off the PCI bus) or ''.
        "nvlink_fabric": fabric["fabric"],
        "imex": fabric["imex"],
        "hcas": hcas,
        "hca_count": len(hcas),
        "pcie": pcie_links(root, devices),
        "secure_boot": secure_boot,
        "container": container is not None,
        "virtualization": container or "metal",
        # Kernel machine name (x86_64, aarch64) and the running kernel release (uname -m / -r).
        "machine": uname.machine,
        "kernel": uname.release,
    }


# Vendors whose devices pcie_links() looks at (NVIDIA GPUs, Mellanox/NVIDIA NICs), as sysfs prints them.
PCIE_VENDORS = ("0x" + pcie_health.NVIDIA_VENDOR_ID, "0x" + pcie_health.MELLANOX_VENDOR_ID)


def pcie_links(root, devices):
    """pcie_health.sysfs_link() of every NVIDIA GPU and Mellanox/NVIDIA NIC among ``devices`` (read_pci_devices() of
    PCIE_VENDORS; the classes pcie_health.link_problems() looks at), in their order, each with its ``kind`` (GPU or
    NIC).

    A virtual function (one with a ``physfn`` link) is left out: its link registers are reserved, its physical
    function carries the link.
    """
    links = []
    for found in devices:
        device_dir = sysfs._path(root, "sys/bus/pci/devices", found["bdf"])
        if os.path.lexists(os.path.join(device_dir, "physfn")):
            continue
        device = pcie_health.sysfs_link(device_dir)
        device["kind"] = pcie_health.device_kind(device)
        if device["kind"]:
            links.append(device)
    return links


def read_packages(module, root):
    """(packages dict or None, warning or None, lists age or None, apt state or None): dpkg's status file when
    there is one (with the age of apt's package lists and apt's state), else rpm -qa."""
    status = sysfs._path(root, "var/lib/dpkg/status")
    if os.path.isfile(status):
        # Read before the status file, so that an install while this runs gives a state no later run matches.
        state = apt_state(root)
        # Read here rather than with sysfs.read_text: a stray non-UTF-8 byte in a description must not lose the list.
        with io.open(status, "r", encoding="utf-8", errors="replace") as handle:
            return installed_packages.parse_dpkg_status(handle.read()), None, package_lists_age(root), state
    rpm = module.get_bin_path("rpm")
    if rpm:
        command = [rpm, "-qa", "--queryformat", installed_packages.RPM_QUERYFORMAT]
        if root != "/":
            command[1:1] = ["--root", root]
        rc, out, err = module.run_command(command, environ_update={"LANGUAGE": "C", "LC_ALL": "C"})
        if rc == 0:
            return installed_packages.parse_rpm_qa(out), None, None, None
        return None, "rpm -qa failed (rc %d: %s): packages not read" % (rc, (err or out).strip()), None, None
    return None, "neither %s nor rpm found: packages not read" % status, None, None


# Where apt's cache_valid_time looks (ansible.builtin.apt: get_cache_mtime), in that order.
APT_LIST_STAMPS = ("var/lib/apt/periodic/update-success-stamp", "var/lib/apt/lists")


def package_lists_age(root, now=None):
    """Seconds since apt last refreshed its package lists under root (never negative), or None without them."""
    for relative in APT_LIST_STAMPS:
        try:
            mtime = os.stat(sysfs._path(root, relative)).st_mtime
        except OSError:
            continue
        return max(0, int((time.time() if now is None else now) - mtime))
    return None


# What apt-get's upgrade answer is made of: the installed packages (dpkg's status and its journal of unfinished
# updates), the package lists, apt's sources, pins and settings. A link is followed (apt reads its target).
APT_STATE_FILES = ("var/lib/dpkg/status",)
APT_STATE_FOLDERS = (("var/lib/dpkg/updates", False), ("var/lib/apt/lists", False), ("etc/apt", True))


def apt_state(root):
    """SHA-256 (hex) of the path, size, mtime and inode of every file apt's upgrade answer depends on, or None when
    dpkg's status file or a folder cannot be read."""
    entries = []
    base = sysfs._path(root, "")

    def add(relative):
        path = sysfs._path(root, relative)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if not os.path.islink(path):
                raise
            entries.append("%s\0dangling\0%s" % (relative, os.readlink(path)))
            return
        if stat.S_ISREG(info.st_mode):
            entries.append("%s\0%d\0%d\0%d" % (relative, info.st_size, info.st_mtime_ns, info.st_ino))

    try:
        for relative in APT_STATE_FILES:
            add(relative)
        for folder, recursive in APT_STATE_FOLDERS:
            top = sysfs._path(root, folder)
            if not os.path.isdir(top):
                entries.append("%s\0absent" % folder)
                continue
            for current, folders, files in os.walk(top, onerror=_raise):
                folders[:] = sorted(folders) if recursive else []
                for name in sorted(files):
                    if name != "lock":
                        add(os.path.relpath(os.path.join(current, name), base))
    except OSError:
        return None
    return hashlib.sha256("\n".join(entries).encode("utf-8", "surrogateescape")).hexdigest()


def present_paths(root, paths):
    """The paths (absolute, read under root) that exist, dangling links included, in the order given."""
    return [path for path in paths if os.path.lexists(sysfs._path(root, path))]


def _raise(error):
    raise error


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            os_release_path=dict(type="path"),
            use_mokutil=dict(type="bool", default=True),
            packages=dict(type="bool", default=False),
            present=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    os_release_path = module.params["os_release_path"] or sysfs._path(root, "etc/os-release")

    mokutil_output = None
    mokutil = module.get_bin_path("mokutil") if module.params["use_mokutil"] and root == "/" else None
    if mokutil:
        rc, out, err = module.run_command(
            [mokutil, "--sb-state"], environ_update={"LANGUAGE": "C", "LC_ALL": "C"})
        mokutil_output = out + err

    facts = gather(root, os_release_path, mokutil_output)
    result = dict(changed=False, ansible_facts={"gpufleet_node": facts},
                  ssh_session=ssh_session() if root == "/" else None,
                  present=present_paths(root, module.params["present"]))
    if module.params["packages"]:
        # A return value, never a fact: roles use this run's list only (preflight keeps it with set_fact).
        result["packages"], warning, result["package_lists_age"], result["apt_state"] = read_packages(module, root)
        if warning:
            module.warn(warning + "; every install task asks the package manager")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
