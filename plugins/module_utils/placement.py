# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The placement map of a node: where each GPU sits (NUMA node, local CPUs, nearest HCA ports, NVLink peers).

The locality comes from sysfs, as the kernel reports it for the PCI device (``numa_node``, ``local_cpulist``, the
device's place in ``/sys/devices``); nvidia-smi gives only what sysfs cannot: each GPU's index and UUID
(``--query-gpu``) and its NVLink peers (``topo -m``). The link class between a GPU and an HCA follows
``nvidia-smi topo -m``'s legend, worked out from the two devices' PCI paths:

- PIX: both below one PCIe switch (at most one bridge between them);
- PXB: below a common bridge, through several switches, without the host bridge;
- PHB: below the same host bridge (PCI root bus), through it;
- NODE: under different host bridges of the same NUMA node;
- SYS: across NUMA nodes.

Readers take ``root`` (a recorded tree in tests); the rest is pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils import sysfs

LINK_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ROOT_BUS = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
NVLINK = re.compile(r"^NV\d+$")
MAP_VERSION = 1


def parse_cpulist(text):
    """CPU numbers of a kernel cpulist (``0-3,8-11``, ``5``, empty), sorted; ValueError on anything else."""
    cpus = set()
    for part in (text or "").strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError("not a CPU list: %r" % text)
        start, end = int(first), int(last) if last else int(first)
        if end < start:
            raise ValueError("not a CPU list: %r" % text)
        cpus.update(range(start, end + 1))
    return sorted(cpus)


def format_cpulist(cpus):
    """The kernel's form of a set of CPU numbers: ranges joined by commas (``0-3,8-11``); empty for none."""
    ranges = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def pci_address(bus_id):
    """nvidia-smi's PCI bus id (``00000000:19:00.0``) in sysfs' form (``0000:19:00.0``), or None."""
    text = (bus_id or "").strip().lower()
    match = re.match(r"^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", text)
    if not match:
        return None
    return "%04x:%s:%s.%s" % (int(match.group(1), 16), match.group(2), match.group(3), match.group(4))


def _read_cpulist(path):
    text = sysfs.read_text(path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def read_numa_nodes(root="/"):
    """[{node, cpus}] from ``/sys/devices/system/node/node<N>/cpulist``, memory-only nodes (no CPU) left out; a
    kernel without NUMA gives one node 0 with the online CPUs (``/sys/devices/system/cpu/online``)."""
    base = sysfs._path(root, "sys/devices/system/node")
    nodes = []
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in sorted(names, key=lambda n: int(n[4:]) if n[4:].isdigit() else -1):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        cpus = _read_cpulist(os.path.join(base, name, "cpulist"))
        if cpus:
            nodes.append({"node": int(name[4:]), "cpus": cpus})
    if not nodes:
        online = _read_cpulist(sysfs._path(root, "sys/devices/system/cpu/online"))
        if online:
            nodes.append({"node": 0, "cpus": online})
    return nodes


def pci_chain(root, device):
    """The PCI path of a device, from its root bus to itself (``['pci0000:15', '0000:15:01.0', '0000:1a:00.0']``),
    read from where ``device`` (a sysfs path under root that leads to the device: ``sys/bus/pci/devices/<address>``,
    ``sys/class/infiniband/<hca>/device``) leads in ``/sys/devices``; None where sysfs does not show it (a recorded
    tree with the device alone)."""
    devices = os.path.realpath(sysfs._path(root, "sys/devices"))
    target = os.path.realpath(sysfs._path(root, device))
    if not os.path.isdir(target) or not target.startswith(devices + os.sep):
        return None
    parts = target[len(devices) + 1:].split(os.sep)
    if not ROOT_BUS.match(parts[0]) or len(parts) < 2 or not all(PCI_ADDRESS.match(p) for p in parts[1:]):
        return None
    return parts


def read_pci_locality(root, device):
    """{numa_node (None where the kernel says -1), cpus (local_cpulist; None where unreadable), chain} of the PCI
    device that the sysfs path ``device`` (relative to root) is or leads to."""
    path = sysfs._path(root, device)
    numa = sysfs.read_text(os.path.join(path, "numa_node"))
    return {
        "numa_node": int(numa) if numa is not None and numa.isdigit() else None,
        "cpus": _read_cpulist(os.path.join(path, "local_cpulist")),
        "chain": pci_chain(root, device),
    }


def gpu_device(address):
    return "sys/bus/pci/devices/%s" % address


def hca_device(name):
    return "sys/class/infiniband/%s/device" % name


def link_class(chain_a, chain_b, numa_a=None, numa_b=None):
    """The topo -m class (PIX, PXB, PHB, NODE, SYS) between two PCI devices from their chains and NUMA nodes;
    None where neither the chains nor the NUMA nodes say."""
    if chain_a and chain_b and chain_a[0] == chain_b[0]:
        bridges_a, bridges_b = chain_a[1:-1], chain_b[1:-1]
        common = 0
        while common < min(len(bridges_a), len(bridges_b)) and bridges_a[common] == bridges_b[common]:
            common += 1
        if common == 0:
            return "PHB"
        if len(bridges_a) - common <= 1 and len(bridges_b) - common <= 1:
            return "PIX"
        return "PXB"
    if numa_a is not None and numa_b is not None:
        return "NODE" if numa_a == numa_b else "SYS"
    if chain_a and chain_b:
        # Different root buses and no NUMA node for either (one socket, or a VM that hides it): one NUMA node.
        return "NODE"
    return None


def link_rank(code):
    return LINK_ORDER.index(code) if code in LINK_ORDER else len(LINK_ORDER)


def nvlink_peers(topo, index):
    """Indexes of the GPUs ``topo -m`` (nvidia_smi.parse_topo_matrix) shows NVLink to from GPU ``index``."""
    row = (topo or {}).get("links", {}).get("GPU%d" % index, {})
    peers = []
    for column, code in row.items():
        if column.startswith("GPU") and column[3:].isdigit() and int(column[3:]) != index and NVLINK.match(code or ""):
            peers.append(int(column[3:]))
    return sorted(peers)


def _topo_nic_link(topo, index, hca_name):
    """The link topo -m prints between GPU ``index`` and the HCA (its column, or the NIC legend's name)."""
    topo = topo or {}
    row = topo.get("links", {}).get("GPU%d" % index, {})
    for column in topo.get("nics", []):
        if column == hca_name or topo.get("nic_names", {}).get(column) == hca_name:
            code = row.get(column)
            return code if code in LINK_ORDER else None
    return None


def _node(value):
    """A NUMA node number, None for the kernel's -1 (no affinity) or an unknown one."""
    return value if isinstance(value, int) and value >= 0 else None


def _topo_numa_node(topo, index, numa_nodes):
    """The NUMA node topo -m's NUMA Affinity gives GPU ``index``: the node it prints, or, where it prints a list of
    nodes (Grace: the CPU node with the CPU-less nodes of GPU memory, ``0,2-17``), the one node of the list that has
    CPUs in ``numa_nodes``; None where it prints none (``N/A``) or the list does not name a single such node."""
    affinity = str((topo or {}).get("numa_affinity", {}).get("GPU%d" % index) or "")
    try:
        nodes = parse_cpulist(affinity)
    except ValueError:
        return None
    if len(nodes) > 1:
        with_cpus = set(entry["node"] for entry in numa_nodes if entry["cpus"])
        nodes = [node for node in nodes if node in with_cpus]
    return nodes[0] if len(nodes) == 1 else None


def _cpus_of_node(numa_nodes, node):
    for entry in numa_nodes:
        if entry["node"] == node:
            return entry["cpus"]
    return None


def build(gpus, localities, numa_nodes, hcas, topo=None, hca_localities=None, gpu_reason=None):
    """The placement map.

    ``gpus``: nvidia_smi.parse_query_gpu rows (index, uuid, pci_bus_id); ``localities``: {PCI address:
    read_pci_locality()} of the GPUs; ``numa_nodes``: read_numa_nodes(); ``hcas``: sysfs.read_infiniband() entries
    (name, pci_address, numa_node, netdevs, ports); ``hca_localities``: {HCA name: read_pci_locality()};
    ``topo``: nvidia_smi.parse_topo_matrix() or None, for the NVLink peers and, where sysfs shows no PCI path,
    the GPU-HCA link; ``gpu_reason``: why there is no GPU list (nvidia-smi missing or failing)."""
    hca_localities = hca_localities or {}
    all_cpus = sorted(set(cpu for entry in numa_nodes for cpu in entry["cpus"]))
    entries = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        address = pci_address(gpu.get("pci_bus_id"))
        local = localities.get(address) or {"numa_node": None, "cpus": None, "chain": None}
        numa = local["numa_node"]
        if numa is None:
            # The kernel gives the device no node (-1: one-socket hosts, many VMs): topo -m's NUMA Affinity.
            numa = _topo_numa_node(topo, gpu["index"], numa_nodes)
        cpus = local["cpus"] or (_cpus_of_node(numa_nodes, numa) if numa is not None else None) or all_cpus
        links = []
        for hca in hcas:
            other = hca_localities.get(hca["name"]) or {"chain": None, "numa_node": _node(hca.get("numa_node"))}
            code = link_class(local["chain"], other["chain"], numa, other.get("numa_node"))
            if code is None or not (local["chain"] and other["chain"]):
                code = _topo_nic_link(topo, gpu["index"], hca["name"]) or code
            if code is not None:
                links.append((link_rank(code), code, hca))
        best = min(rank for rank, _code, _hca in links) if links else None
        entries.append({
            "index": gpu["index"],
            "uuid": gpu.get("uuid"),
            "pci_address": address,
            "numa_node": numa,
            "cpus": format_cpulist(cpus),
            "nearest_hcas": [
                {"name": hca["name"], "link": code, "netdevs": list(hca.get("netdevs") or []),
                 "ports": [port["port"] for port in hca.get("ports") or []],
                 "active_ports": [port["port"] for port in hca.get("ports") or [] if port.get("state") == "ACTIVE"]}
                for rank, code, hca in links if rank == best],
            "nvlink_peers": nvlink_peers(topo, gpu["index"]),
        })
    return {
        "version": MAP_VERSION,
        "numa_nodes": [{"node": entry["node"], "cpus": format_cpulist(entry["cpus"])} for entry in numa_nodes],
        "cpus": format_cpulist(all_cpus),
        "gpus": entries,
        "gpu_reason": None if entries else (gpu_reason or "no NVIDIA GPU"),
        "hcas": [{"name": hca["name"], "pci_address": hca.get("pci_address"), "numa_node": _node(hca.get("numa_node"))}
                 for hca in hcas],
    }
