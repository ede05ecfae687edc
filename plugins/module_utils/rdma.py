# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""RDMA (InfiniBand/RoCE) facts and expectation checks, pure Python, no Ansible import.

The HCA and port reading is ``sysfs.read_infiniband``/``sysfs.parse_port``; this file adds what they do
not read (the RoCE GID table: ``ports/<n>/gids/<i>`` and ``ports/<n>/gid_attrs/{types,ndevs}/<i>``, see the
kernel's Documentation/ABI/stable/sysfs-class-infiniband), the selection of HCAs the interconnect
configuration names, and the comparison of what is there with what an operator expects.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.cluster.plugins.module_utils import sysfs

LINK_LAYERS = ("InfiniBand", "Ethernet")
ROCE_V2 = "RoCE v2"
# An IPv4-mapped GID (::ffff:a.b.c.d) as the kernel prints it in ports/<n>/gids/<i>.
IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
MELLANOX_VENDOR = "0x15b3"
# PCI device ids of the mlx5 family, named as the kernel's mlx5_core_pci_table names them
# (drivers/net/ethernet/mellanox/mlx5/core/main.c).
MLX5_MODELS = {
    "0x1013": "ConnectX-4",
    "0x1015": "ConnectX-4 Lx",
    "0x1017": "ConnectX-5",
    "0x1019": "ConnectX-5 Ex",
    "0x101b": "ConnectX-6",
    "0x101d": "ConnectX-6 Dx",
    "0x101e": "ConnectX Family mlx5Gen Virtual Function",
    "0x101f": "ConnectX-6 Lx",
    "0x1021": "ConnectX-7",
    "0x1023": "ConnectX-8",
    "0xa2d2": "BlueField (integrated ConnectX-5)",
    "0xa2d6": "BlueField-2 (integrated ConnectX-6 Dx)",
    "0xa2dc": "BlueField-3 (integrated ConnectX-7)",
    "0xa2df": "BlueField-4 (integrated ConnectX-8)",
}
# BlueField DPUs: on NVSwitch systems such as DGX B200 they carry storage and in-band management next to the
# ConnectX compute HCAs. Where BlueField-3 SuperNICs are the compute fabric (Spectrum-X), pass [] instead.
MANAGEMENT_DEVICE_IDS = ("0xa2d2", "0xa2d6", "0xa2dc", "0xa2df")


def _sorted_numeric(names):
    return sorted((n for n in names if n.isdigit()), key=int)


def read_gid_table(root, hca, port):
    """Return the populated GID entries of one port: [{index, gid, type, ndev}].

    The kernel lists every slot of the table under ``gids/``; unused slots read as all zeros and their
    ``gid_attrs/types/<i>`` cannot be read, so both are skipped.
    """
    port_dir = sysfs._path(root, "sys/class/infiniband", hca, "ports", str(port))
    try:
        indices = _sorted_numeric(os.listdir(os.path.join(port_dir, "gids")))
    except OSError:
        return []
    entries = []
    for index in indices:
        gid = sysfs.read_text(os.path.join(port_dir, "gids", index))
        if not gid or gid == ZERO_GID:
            continue
        entries.append({
            "index": int(index),
            "gid": gid,
            "type": sysfs.read_text(os.path.join(port_dir, "gid_attrs", "types", index)),
            "ndev": sysfs.read_text(os.path.join(port_dir, "gid_attrs", "ndevs", index)),
        })
    return entries


def roce_v2_ipv4_gid_index(gids):
    """Index of the first RoCE v2 GID that carries an IPv4 address (what NCCL_IB_GID_INDEX wants), or None."""
    for entry in gids:
        if entry.get("type") == ROCE_V2 and entry.get("gid", "").startswith(IPV4_MAPPED_PREFIX):
            return entry["index"]
    return None


def _pci_id(value):
    value = (value or "").strip().lower()
    return value or None


def gather(root="/"):
    """Read every RDMA device under <root>/sys/class/infiniband, with each port's GID table summary and the
    PCI vendor/device id (``device/vendor``, ``device/device``) and the model name that id stands for."""
    hcas = sysfs.read_infiniband(root)
    for hca in hcas:
        device_dir = sysfs._path(root, "sys/class/infiniband", hca["name"], "device")
        hca["pci_vendor_id"] = _pci_id(sysfs.read_text(os.path.join(device_dir, "vendor")))
        hca["pci_device_id"] = _pci_id(sysfs.read_text(os.path.join(device_dir, "device")))
        hca["model"] = (MLX5_MODELS.get(hca["pci_device_id"])
                        if hca["pci_vendor_id"] == MELLANOX_VENDOR else None)
        for port in hca["ports"]:
            gids = read_gid_table(root, hca["name"], port["port"])
            port["roce_v2_ipv4_gid_index"] = roce_v2_ipv4_gid_index(gids)
            netdevs = sorted(set(g["ndev"] for g in gids if g.get("ndev")))
            port["netdev"] = netdevs[0] if netdevs else None
            port["name"] = "%s:%s" % (hca["name"], port["port"])
    return hcas


def select(hcas, exclude=None):
    """Split the HCAs into those the configuration names and those left out by name."""
    exclude = set(exclude or [])
    return [h for h in hcas if h["name"] not in exclude], [h for h in hcas if h["name"] in exclude]


def split_management(hcas, names=None, device_ids=MANAGEMENT_DEVICE_IDS):
    """Split HCAs into compute HCAs and management/storage ones (BlueField DPUs by PCI device id, or named).

    Each management HCA gets ``role: management`` and a ``role_reason``; each compute one ``role: compute``.
    """
    names = set(names or [])
    ids = set(_pci_id(i) for i in (device_ids or []))
    compute, management = [], []
    for hca in hcas:
        if hca["name"] in names:
            hca["role"], hca["role_reason"] = "management", "named in management_hcas"
            management.append(hca)
        elif hca.get("pci_device_id") in ids:
            hca["role"] = "management"
            hca["role_reason"] = "PCI device %s (%s) is in management_device_ids" % (
                hca["pci_device_id"], hca.get("model") or "unknown model")
            management.append(hca)
        else:
            hca["role"], hca["role_reason"] = "compute", None
            compute.append(hca)
    return compute, management


def summarize(hcas, default_gid_index=3):
    """What the UCX/NCCL/MPI configuration needs from the selected HCAs."""
    ports = [p for h in hcas for p in h["ports"]]
    roce_ports = [p for p in ports if p["link_layer"] == "Ethernet"]
    ib_ports = [p for p in ports if p["link_layer"] == "InfiniBand"]
    gid_index = None
    if roce_ports:
        found = [p["roce_v2_ipv4_gid_index"] for p in roce_ports if p["roce_v2_ipv4_gid_index"] is not None]
        gid_index = min(found) if found else default_gid_index
    return {
        "hca_count": len(hcas),
        "port_count": len(ports),
        "active_port_count": len([p for p in ports if p["state"] == "ACTIVE"]),
        "infiniband": bool(ib_ports),
        "roce": bool(roce_ports),
        "link_layers": sorted(set(p["link_layer"] for p in ports)),
        "ports": [p["name"] for p in ports],
        # "=" makes NCCL match the names exactly (mlx5_1 would otherwise also match mlx5_10..mlx5_19).
        "nccl_ib_hca": ("=" + ",".join(p["name"] for p in ports)) if ports else None,
        "nccl_ib_gid_index": gid_index,
    }


def _port_line(hca, port, wanted, found):
    return "%s port %s (%s): expected %s; found %s" % (
        hca["name"], port["port"], hca.get("pci_address") or "no PCI address",
        ", ".join(wanted), ", ".join(found))


def check(hcas, expect_hcas=None, expect_state=None, min_rate_gbps=None, link_layer=None):
    """Compare the HCAs with the expectations; return one readable line per miss (empty: all met).

    The HCA count gets one line; every port that misses any expectation gets one line naming each
    expectation it misses and what the port shows instead.
    """
    problems = []
    if expect_hcas is not None and len(hcas) != expect_hcas:
        problems.append("expected %d RDMA HCA(s), found %d%s" % (
            expect_hcas, len(hcas),
            (" (%s)" % ", ".join(h["name"] for h in hcas)) if hcas else " under /sys/class/infiniband"))
    port_checks = expect_state is not None or min_rate_gbps is not None or link_layer is not None
    if port_checks and not any(h["ports"] for h in hcas) and expect_hcas is None:
        problems.append("expected RDMA ports to check, found no RDMA device under /sys/class/infiniband")
    if not port_checks:
        return problems
    for hca in hcas:
        for port in hca["ports"]:
            wanted, found = [], []
            if expect_state is not None and port["state"] != expect_state:
                wanted.append("state %s" % expect_state)
                found.append("state %s (phys %s)" % (port["state"], port["phys_state"]))
            rate = port.get("rate_gbps")
            if min_rate_gbps is not None and (rate is None or rate < min_rate_gbps):
                wanted.append("rate >= %g Gb/s" % min_rate_gbps)
                found.append("rate %s" % (port.get("rate") or "unknown"))
            if link_layer is not None and port["link_layer"] != link_layer:
                wanted.append("link layer %s" % link_layer)
                found.append("link layer %s" % port["link_layer"])
            if wanted:
                problems.append(_port_line(hca, port, wanted, found))
    return problems
