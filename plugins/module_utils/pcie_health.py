# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure readers and checks for the PCIe links of GPUs and RDMA NICs. No Ansible import here.

``parse_lspci_vvv`` reads ``lspci -vvv`` (``-vv`` prints the same lines; ``-nn`` and ``-D`` may be added) as
lspci prints it, with spaces or tabs, and the way operators paste it: a prompt line, a markdown fence or a label
between the devices, a device cut down to the lines that matter. For every device it keeps the address, the class,
the vendor/device description, the PCI Express capability's ``LnkCap`` (the speed and width the device can train
to) and ``LnkSta`` (what it trained to, with the ``(ok)``/``(downgraded)`` markers newer lspci prints), the Access
Control Services ``ACSCap``/``ACSCtl`` flags and ``Kernel driver in use``.

``sysfs_link`` reads the same link fields from a device directory of ``/sys/bus/pci/devices`` (the kernel's
``current_link_speed``/``current_link_width`` are ``LnkSta``, ``max_link_speed``/``max_link_width`` the device's
own ``LnkCap``), so both feed the same checks:

* ``link_problems``: a GPU or NIC whose link trained below what it can do. A narrower link than the device's
  capability is always a problem (a slot wired narrower, a riser, bifurcation, a bad contact). A slower link is a
  problem for a NIC; on an NVIDIA GPU it is only a note, because an idle GPU lowers its link speed to save power
  (2.5 GT/s at idle is normal) and trains back up under load: check it again while the GPU is busy.
* ``acs_problems``: a PCI bridge (root port or switch port) with ACS request or completion redirection on, which
  sends peer-to-peer traffic between the devices below it (GPU to GPU, GPU to NIC for GPUDirect RDMA) up to the
  root complex instead of across the switch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.sysfs import read_text

NVIDIA_VENDOR_ID = "10de"
MELLANOX_VENDOR_ID = "15b3"

# Vendor names as lspci prints them (pci.ids), for output without -nn.
VENDOR_IDS = {
    "NVIDIA Corporation": NVIDIA_VENDOR_ID,
    "Mellanox Technologies": MELLANOX_VENDOR_ID,
}

# Class names as lspci prints them (pci.ids "C" lines), to the class/subclass id -nn prints after them.
CLASS_IDS = {
    "RAID bus controller": "0104",
    "Ethernet controller": "0200",
    "Infiniband controller": "0207",
    "VGA compatible controller": "0300",
    "3D controller": "0302",
    "PCI bridge": "0604",
    "Bridge": "0680",
}
CLASS_NAMES = dict((class_id, name) for name, class_id in CLASS_IDS.items())
PCI_BRIDGE_CLASS_ID = "0604"

# (vendor id or None for any vendor, class id, what the device is) of the devices link_problems looks at.
DEFAULT_CLASSES = (
    (NVIDIA_VENDOR_ID, "0300", "GPU"),
    (NVIDIA_VENDOR_ID, "0302", "GPU"),
    (MELLANOX_VENDOR_ID, "0200", "NIC"),
    (MELLANOX_VENDOR_ID, "0207", "NIC"),
)

# The two ACS controls that, when on, send peer-to-peer requests and completions up to the root complex.
ACS_REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir")

# "01:00.0 VGA compatible controller: ..." or with -D "0000:01:00.0 ...", with -nn "... controller [0300]: ...".
DEVICE_HEADER = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])"
    r"\s+(?P<class>[^:\[]+?)(?:\s+\[(?P<class_id>[0-9a-fA-F]{4})\])?:\s+(?P<description>.*)$")
VENDOR_DEVICE_IDS = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
REVISION = re.compile(r"\(rev (?P<rev>[0-9a-fA-F]+)\)")
PROG_IF = re.compile(r"\s*\(prog-if [^()]*(?:\([^()]*\)[^()]*)*\)\s*$")
LINK_SPEED = re.compile(r"Speed\s+(?:(?P<speed>[\d.]+)\s*GT/s|(?P<unknown>unknown))(?:\s*\((?P<marker>[a-z]+)\))?")
LINK_WIDTH = re.compile(r"Width\s+x(?P<width>\d+)(?:\s*\((?P<marker>[a-z]+)\))?")
ACS_FLAG = re.compile(r"(?P<name>[A-Za-z0-9]+)(?P<state>[+-])(?=\s|$)")
# sysfs: "32.0 GT/s PCIe" (kernel 5.7 and later), "8 GT/s" (older), "Unknown" where the kernel has no speed.
SYSFS_SPEED = re.compile(r"^(?P<speed>[\d.]+)\s*GT/s")


def _speed_text(speed):
    """16.0 -> "16GT/s", 2.5 -> "2.5GT/s": the way lspci writes a speed."""
    return ("%g" % speed) + "GT/s" if speed is not None else "unknown speed"


def _parse_link(value):
    """The fields of a LnkCap/LnkSta value: speed in GT/s, width in lanes and lspci's markers for each."""
    link = {"speed_gts": None, "width": None, "speed_marker": None, "width_marker": None}
    speed = LINK_SPEED.search(value)
    if speed:
        if speed.group("speed"):
            link["speed_gts"] = float(speed.group("speed"))
        link["speed_marker"] = speed.group("marker")
    width = LINK_WIDTH.search(value)
    if width:
        link["width"] = int(width.group("width"))
        link["width_marker"] = width.group("marker")
    return link


def _parse_acs(value):
    """{"SrcValid": False, "ReqRedir": True, ...} from an ACSCap/ACSCtl value."""
    return dict((flag.group("name"), flag.group("state") == "+") for flag in ACS_FLAG.finditer(value))


def _new_device(header):
    domain = (header.group("domain") or "0000").lower()
    address = "%s:%s:%s.%s" % (domain.zfill(4), header.group("bus").lower(), header.group("slot").lower(),
                               header.group("function"))
    class_name = header.group("class").strip()
    description = header.group("description").strip()
    ids = VENDOR_DEVICE_IDS.findall(description)
    vendor_id, device_id = (ids[-1][0].lower(), ids[-1][1].lower()) if ids else (None, None)
    if vendor_id is None:
        vendor_id = next((vid for name, vid in VENDOR_IDS.items() if description.startswith(name)), None)
    revision = REVISION.search(description)
    return {
        "address": address,
        "class": class_name,
        "class_id": (header.group("class_id") or CLASS_IDS.get(class_name) or "").lower() or None,
        "description": description,
        "vendor_id": vendor_id,
        "device_id": device_id,
        "revision": revision.group("rev").lower() if revision else None,
        "link_cap": None,
        "link_status": None,
        "acs_cap": None,
        "acs_ctl": None,
        "driver": None,
    }


def parse_lspci_vvv(text):
    """Devices of ``lspci -vvv`` output (optionally ``-nn``, ``-D``), in the order printed.

    Each device is a dict: ``address`` (always with the domain, ``0000:01:00.0``), ``class`` (``3D controller``),
    ``class_id`` (``0302``; from ``-nn`` or the class name), ``description`` (the rest of the header line, vendor,
    device, revision and prog-if as printed), ``vendor_id``/``device_id`` (from ``-nn``'s ``[10de:2330]``; without
    ``-nn`` the vendor id of an NVIDIA or Mellanox name, the device id None), ``revision``, ``link_cap`` and
    ``link_status`` ({"speed_gts": 16.0, "width": 16, "speed_marker": "downgraded"|"ok"|None, "width_marker": ...},
    None where the device has no such line, e.g. lspci run without root prints ``Capabilities: <access denied>``),
    ``acs_cap``/``acs_ctl`` ({"SrcValid": True, "ReqRedir": False, ...}, None without an ACS capability) and
    ``driver`` (``Kernel driver in use``, None when no driver is bound).

    A device's block ends at a blank line or at any line that is not indented, so prompt lines, markdown fences
    and labels between devices are skipped.
    """
    devices = []
    current = None
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        header = DEVICE_HEADER.match(line)
        if header:
            current = _new_device(header)
            devices.append(current)
            continue
        if current is None:
            continue
        if not line or not line[0].isspace():
            current = None
            continue
        label, sep, value = line.strip().partition(":")
        if not sep:
            continue
        value = value.strip()
        if label == "LnkCap":
            current["link_cap"] = _parse_link(value)
        elif label == "LnkSta":
            current["link_status"] = _parse_link(value)
        elif label == "ACSCap":
            current["acs_cap"] = _parse_acs(value)
        elif label == "ACSCtl":
            current["acs_ctl"] = _parse_acs(value)
        elif label == "Kernel driver in use":
            current["driver"] = value
    return devices


def _sysfs_speed(path):
    """GT/s from a sysfs *_link_speed file; None for "Unknown", a missing file or another text."""
    match = SYSFS_SPEED.match(read_text(path) or "")
    return float(match.group("speed")) if match else None


def _sysfs_width(path):
    value = read_text(path)
    return int(value) if value and value.isdigit() else None


def _sysfs_id(path, digits):
    """The first ``digits`` hex digits of a sysfs id file: 0x10de gives 10de, the class 0x030200 gives 0302."""
    value = (read_text(path) or "").lower()
    return value[2:2 + digits] if value.startswith("0x") and len(value) >= 2 + digits else None


def sysfs_link(device_dir):
    """A device of ``/sys/bus/pci/devices`` in the shape of parse_lspci_vvv()'s devices, for link_problems().

    ``link_status`` comes from ``current_link_speed``/``current_link_width``, ``link_cap`` from
    ``max_link_speed``/``max_link_width`` (each None when both of its files are missing); a speed the kernel
    prints as ``Unknown`` reads None. ``vendor_id``, ``device_id`` and ``class_id`` come from the ``vendor``,
    ``device`` and ``class`` files, ``driver`` from the name the ``driver`` link points to. sysfs prints no
    ``(downgraded)`` marker and no ACS state, so those stay None.
    """
    device_dir = device_dir.rstrip("/")

    def link(speed_file, width_file):
        speed_path, width_path = os.path.join(device_dir, speed_file), os.path.join(device_dir, width_file)
        if not (os.path.exists(speed_path) or os.path.exists(width_path)):
            return None
        return {"speed_gts": _sysfs_speed(speed_path), "width": _sysfs_width(width_path),
                "speed_marker": None, "width_marker": None}

    class_id = _sysfs_id(os.path.join(device_dir, "class"), 4)
    driver_link = os.path.join(device_dir, "driver")
    return {
        "address": os.path.basename(device_dir),
        "class": CLASS_NAMES.get(class_id),
        "class_id": class_id,
        "description": None,
        "vendor_id": _sysfs_id(os.path.join(device_dir, "vendor"), 4),
        "device_id": _sysfs_id(os.path.join(device_dir, "device"), 4),
        "revision": None,
        "link_cap": link("max_link_speed", "max_link_width"),
        "link_status": link("current_link_speed", "current_link_width"),
        "acs_cap": None,
        "acs_ctl": None,
        "driver": os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None,
    }


def compare_link(link_cap, link_status):
    """(speed below capability, width below capability), each None where one side is not known."""
    link_cap, link_status = link_cap or {}, link_status or {}

    def below(key):
        capable, current = link_cap.get(key), link_status.get(key)
        if capable is None or current is None:
            return None
        return current < capable

    return below("speed_gts"), below("width")


def device_kind(device, classes=DEFAULT_CLASSES):
    """GPU, NIC (or another kind of ``classes``) of a device by its vendor and class ids; None for others."""
    for vendor_id, class_id, kind in classes:
        if device.get("class_id") == class_id and (vendor_id is None or device.get("vendor_id") == vendor_id):
            return kind
    return None


def _name(device):
    """The device as lspci names it, without the programming interface: "NVIDIA Corporation ... (rev a1)"."""
    return PROG_IF.sub("", device.get("description") or "") or device.get("class") or "PCI device"


def _finding(device, kind, what, message):
    key = {"speed": "speed_gts", "width": "width"}.get(what)
    current = (device.get("link_status") or {}).get(key) if key else None
    capable = (device.get("link_cap") or {}).get(key) if key else None
    return {"address": device["address"], "kind": kind, "name": _name(device), "what": what,
            "current": current, "capable": capable, "message": message}


def link_problems(devices, classes=DEFAULT_CLASSES):
    """Links of GPUs and NICs trained below what the device can do.

    ``devices`` come from parse_lspci_vvv() or sysfs_link(); ``classes`` lists (vendor id or None, class id,
    kind) of the devices to look at, by default NVIDIA VGA/3D controllers (``GPU``) and Mellanox/NVIDIA Ethernet
    and InfiniBand controllers (``NIC``); every other device is left alone.

    Returns {"problems": [...], "notes": [...]}, each item a dict with ``address``, ``kind``, ``name``, ``what``
    (``width``, ``speed`` or ``link``), ``current``, ``capable`` and ``message``:

    * a width below the capability is a problem for every device looked at: the slot or riser gives fewer lanes
      than the device has, and lanes do not come back under load;
    * a speed below the capability is a problem for a NIC, but only a note for an NVIDIA GPU: an idle GPU drops
      its link speed to save power (to 2.5 GT/s, PCIe Gen1) and raises it again when it works, so the speed has to
      be checked while the GPU is under load before it counts;
    * a device whose capability or status was not read (lspci without root, a sysfs without ``max_link_*``) is a
      note that its link could not be checked.
    """
    problems, notes = [], []
    for device in devices or []:
        kind = device_kind(device, classes)
        if kind is None:
            continue
        cap, sta = device.get("link_cap"), device.get("link_status")
        address, name = device["address"], _name(device)
        speed_below, width_below = compare_link(cap, sta)
        if speed_below is None and width_below is None:
            missing = "capability" if not cap else "status" if not sta else "speed and width"
            notes.append(_finding(device, kind, "link", "%s %s (%s): link %s not known, not checked"
                                  % (kind, address, name, missing)))
            continue
        if width_below:
            problems.append(_finding(device, kind, "width", "%s %s (%s): link width x%d, capable of x%d"
                                     % (kind, address, name, sta["width"], cap["width"])))
        if speed_below:
            text = "%s %s (%s): link speed %s, capable of %s" % (kind, address, name, _speed_text(sta["speed_gts"]),
                                                                 _speed_text(cap["speed_gts"]))
            if kind == "GPU" and device.get("vendor_id") == NVIDIA_VENDOR_ID:
                notes.append(_finding(device, kind, "speed", text + " - may be power saving while idle, check "
                                      "again under load"))
            else:
                problems.append(_finding(device, kind, "speed", text))
    return {"problems": problems, "notes": notes}


def acs_problems(devices):
    """PCI bridges (root ports, switch ports) with ACS request or completion redirection on.

    With ``ReqRedir+`` or ``CmpltRedir+`` in a bridge's ``ACSCtl``, peer-to-peer requests or completions that
    would cross the bridge are sent up to the root complex first: GPU to GPU and GPU to NIC traffic (GPUDirect
    RDMA) under the same switch then goes through the CPU's root complex, slower, and with an IOMMU in the way may
    fail. Bridges without an ACS capability, or with both flags off, are fine.

    Returns a list of dicts with ``address``, ``name`` (the bridge as lspci names it), ``redirect`` (the flags that
    are on, ``["ReqRedir", "CmpltRedir"]``) and ``message``.
    """
    found = []
    for device in devices or []:
        if device.get("class_id") != PCI_BRIDGE_CLASS_ID or not device.get("acs_ctl"):
            continue
        redirect = [flag for flag in ACS_REDIRECT_FLAGS if device["acs_ctl"].get(flag)]
        if redirect:
            name = _name(device)
            found.append({"address": device["address"], "name": name, "redirect": redirect,
                          "message": "PCI bridge %s (%s): ACS %s on - peer-to-peer traffic below it goes through "
                                     "the root complex" % (device["address"], name, "+ ".join(redirect) + "+")})
    return found
