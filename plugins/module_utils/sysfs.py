# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure readers for the Linux sysfs/procfs files gpufleet looks at.

Every function takes a ``root`` so tests can point it at a recorded tree shaped exactly like the
kernel's (``<root>/sys/bus/pci/devices/...``). No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

NVIDIA_VENDOR = "0x10de"
# PCI class codes (class/subclass/prog-if as the kernel prints them in .../class)
PCI_CLASS_VGA = "0x030000"
PCI_CLASS_3D = "0x030200"
PCI_CLASS_BRIDGE_OTHER = "0x068000"  # NVSwitch enumerates as "Bridge: NVIDIA Corporation Device ..."

# First PCI device id of the Turing generation; every NVIDIA GPU id from here on is Turing or newer
# (Turing TU10x starts at 0x1e02; Volta GV100 is 0x1db*, Pascal 0x15*/0x1b*).
TURING_FIRST_DEVICE_ID = 0x1E00

# Blackwell GPUs whose NVLink 5 switches are not on the host's PCI bus (on HGX B200/GB200 the switch trays sit
# behind ConnectX-7 bridge functions, per NVIDIA's Fabric Manager user guide), so no 0x0680 NVSwitch shows up:
# the GPU id alone says the node needs the fabric manager and NVLSM. Device ids from Debian's pci.ids
# 0.0~2025.06.09: 2901 GB100 [B200], 2941 GB100 [HGX GB200], 31c0 GB110 (GB300).
NVLINK5_FABRIC_GPUS = {0x2901: "b200", 0x2941: "gb200", 0x31C0: "gb300"}
# Of those, the Grace-Blackwell rack parts (NVL72) that share memory across nodes through NVIDIA IMEX.
IMEX_GPUS = {0x2941, 0x31C0}

SUPPORTED_OS = {
    "debian": ("12", "13"),
    "ubuntu": ("22.04", "24.04"),
    "rocky": ("9",),
    "rhel": ("9",),
}

OS_FAMILY = {"debian": "Debian", "ubuntu": "Debian", "rocky": "RedHat", "rhel": "RedHat"}


def _path(root, *parts):
    return os.path.join(root or "/", *[p.lstrip("/") for p in parts])


def read_text(path, default=None):
    """Return the stripped content of a file, or ``default`` when it cannot be read."""
    try:
        with open(path, "r") as handle:
            return handle.read().strip()
    except (IOError, OSError, UnicodeDecodeError):
        return default


def parse_os_release(text):
    """Parse /etc/os-release (shell-style KEY=value lines) into a dict."""
    values = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value.replace('\\"', '"')
    return values


def os_summary(os_release):
    """Reduce os-release values to what the roles select on."""
    os_id = os_release.get("ID", "").lower()
    version_id = os_release.get("VERSION_ID", "")
    if os_id == "debian" and not version_id:
        # Debian testing/sid carry no VERSION_ID; the codename is all there is.
        version_id = ""
    major = version_id if os_id == "ubuntu" else version_id.split(".")[0]
    id_like = os_release.get("ID_LIKE", "").lower().split()
    family = OS_FAMILY.get(os_id)
    if family is None:
        if "debian" in id_like or "ubuntu" in id_like:
            family = "Debian"
        elif "rhel" in id_like or "fedora" in id_like:
            family = "RedHat"
        else:
            family = "unknown"
    return {
        "id": os_id,
        "version_id": version_id,
        "major": major,
        "codename": os_release.get("VERSION_CODENAME", ""),
        "pretty_name": os_release.get("PRETTY_NAME", os_id),
        "family": family,
    }


def os_support_problem(summary, supported=None):
    """Return None when the OS is supported, else a sentence an operator understands."""
    supported = SUPPORTED_OS if supported is None else supported
    os_id, major = summary.get("id", ""), summary.get("major", "")
    wanted = ", ".join(
        "%s %s" % (name, "/".join(versions)) for name, versions in sorted(supported.items())
    )
    if os_id not in supported:
        return "unsupported operating system %r (%s); gpufleet supports %s" % (
            os_id or "unknown", summary.get("pretty_name") or "no /etc/os-release", wanted)
    if major not in supported[os_id]:
        return "unsupported %s version %r (%s); gpufleet supports %s" % (
            os_id, summary.get("version_id") or "none", summary.get("pretty_name"), wanted)
    return None


def _hex_id(value):
    try:
        return int(value, 16)
    except (TypeError, ValueError):
        return None


def _sorted_entries(path):
    """Names in a sysfs directory, sorted; none when it does not exist."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _numa_node(path):
    """The numa_node file as an int; None when absent or unreadable (-1 means no NUMA affinity)."""
    value = read_text(path)
    return int(value) if value not in (None, "") and value.lstrip("-").isdigit() else None


def read_pci_devices(root="/", vendor=NVIDIA_VENDOR):
    """List PCI devices of one vendor (or of each vendor of a tuple) from <root>/sys/bus/pci/devices, sorted by
    address; ``vendor`` of each entry is its own."""
    vendors = (vendor,) if isinstance(vendor, str) else tuple(vendor)
    base = _path(root, "sys/bus/pci/devices")
    devices = []
    for bdf in _sorted_entries(base):
        dev_dir = os.path.join(base, bdf)
        vendor = (read_text(os.path.join(dev_dir, "vendor")) or "").lower()
        if vendor not in vendors:
            continue
        driver_link = os.path.join(dev_dir, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        devices.append({
            "bdf": bdf,
            "vendor": vendor,
            "device": (read_text(os.path.join(dev_dir, "device")) or "").lower(),
            "class": (read_text(os.path.join(dev_dir, "class")) or "").lower(),
            "numa_node": _numa_node(os.path.join(dev_dir, "numa_node")),
            "driver": driver,
        })
    return devices


def classify_nvidia(devices):
    """Split NVIDIA PCI devices into GPUs and NVSwitches and say whether all GPUs are Turing or newer."""
    gpus = [d for d in devices if d["class"] in (PCI_CLASS_VGA, PCI_CLASS_3D)]
    switches = [d for d in devices if d["class"] == PCI_CLASS_BRIDGE_OTHER]
    ids = [_hex_id(d["device"]) for d in gpus]
    turing_or_newer = bool(ids) and all(i is not None and i >= TURING_FIRST_DEVICE_ID for i in ids)
    return gpus, switches, turing_or_newer


def nvlink_fabric(gpus, switches):
    """Which NVLink fabric the node has: 'nvswitch' (NVSwitches on the PCI bus: HGX A100/H100/H200),
    'nvlink5' (Blackwell HGX/NVL parts whose switches sit off the host bus), or '' (none).

    Returns ``{"fabric": ..., "imex": bool}``; imex is true for Grace-Blackwell rack GPUs (GB200/GB300).
    """
    ids = [_hex_id(d["device"]) for d in gpus]
    if ids and any(i in NVLINK5_FABRIC_GPUS for i in ids):
        return {"fabric": "nvlink5", "imex": any(i in IMEX_GPUS for i in ids)}
    if switches:
        return {"fabric": "nvswitch", "imex": False}
    return {"fabric": "", "imex": False}


def read_infiniband(root="/"):
    """List RDMA devices under <root>/sys/class/infiniband with their ports (state, rate, link layer)."""
    base = _path(root, "sys/class/infiniband")
    hcas = []
    for name in _sorted_entries(base):
        hca_dir = os.path.join(base, name)
        device_dir = os.path.join(hca_dir, "device")
        pci = None
        if os.path.islink(device_dir):
            pci = os.path.basename(os.readlink(device_dir))
        netdevs = _sorted_entries(os.path.join(device_dir, "net"))
        ports = []
        ports_dir = os.path.join(hca_dir, "ports")
        try:
            port_names = sorted(os.listdir(ports_dir), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            port_names = []
        for port in port_names:
            port_dir = os.path.join(ports_dir, port)
            ports.append(parse_port(
                port,
                state=read_text(os.path.join(port_dir, "state")),
                phys_state=read_text(os.path.join(port_dir, "phys_state")),
                rate=read_text(os.path.join(port_dir, "rate")),
                link_layer=read_text(os.path.join(port_dir, "link_layer")),
            ))
        hcas.append({
            "name": name,
            "pci_address": pci,
            "numa_node": _numa_node(os.path.join(device_dir, "numa_node")),
            "netdevs": netdevs,
            "fw_ver": read_text(os.path.join(hca_dir, "fw_ver")),
            "ports": ports,
        })
    return hcas


_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_RATE_RE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec", re.IGNORECASE)


def parse_port(port, state=None, phys_state=None, rate=None, link_layer=None):
    """Turn the kernel's port attribute strings ("4: ACTIVE", "400 Gb/sec (4X NDR)") into values."""
    state_match = _STATE_RE.match(state or "")
    phys_match = _STATE_RE.match(phys_state or "")
    rate_match = _RATE_RE.match(rate or "")
    return {
        "port": int(port) if str(port).isdigit() else port,
        "state": state_match.group(2) if state_match else (state or "UNKNOWN"),
        "phys_state": phys_match.group(2) if phys_match else (phys_state or "UNKNOWN"),
        "rate_gbps": float(rate_match.group(1)) if rate_match else None,
        "rate": rate,
        "link_layer": link_layer or "UNKNOWN",
    }


SECURE_BOOT_EFIVAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def secure_boot_from_efivars(root="/"):
    """enabled/disabled from the SecureBoot EFI variable, 'unknown' when the firmware exposes none."""
    try:
        with open(_path(root, SECURE_BOOT_EFIVAR), "rb") as handle:
            data = handle.read()
    except (IOError, OSError):
        if os.path.isdir(_path(root, "sys/firmware/efi")):
            return "disabled"
        return "unknown"
    # 4 bytes of attributes, then the value byte.
    if len(data) >= 5:
        return "enabled" if data[4] == 1 else "disabled"
    return "unknown"


def secure_boot_from_mokutil(text):
    """Parse `mokutil --sb-state` ("SecureBoot enabled" / "SecureBoot disabled" / "EFI variables are not supported...")."""
    lowered = (text or "").lower()
    if "secureboot enabled" in lowered:
        return "enabled"
    if "secureboot disabled" in lowered:
        return "disabled"
    return "unknown"


def detect_container(root="/"):
    """Return the container technology name, or None on bare metal / a VM."""
    marker = read_text(_path(root, "run/systemd/container"))
    if marker:
        return marker
    if os.path.exists(_path(root, ".dockerenv")):
        return "docker"
    if os.path.exists(_path(root, "run/.containerenv")):
        return "podman"
    environ = None
    try:
        with open(_path(root, "proc/1/environ"), "rb") as handle:
            environ = handle.read()
    except (IOError, OSError):
        environ = None
    if environ:
        for item in environ.split(b"\0"):
            if item.startswith(b"container="):
                return item.split(b"=", 1)[1].decode("ascii", "replace") or "container"
    return None
