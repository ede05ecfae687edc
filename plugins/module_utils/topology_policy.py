# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure checks of a GPU topology against expectations, named profiles and the one-line summary.

Works on the ``gpu_topology`` dict built by the gpu_topology module (``gpus``, ``links``, ``nics``,
``driver_version``). No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver

# Link classes from best to worst, as nvidia-smi topo -m prints them. SOC is the name drivers before
# R384 used for SYS.
LINK_CLASSES = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
LINK_EXPECTATION = re.compile(r"^(NV\d*|PIX|PXB|PHB|NODE|SYS)$")
NIC_DISTANCES = LINK_CLASSES[1:]

EXPECTATION_KEYS = ("gpu_count", "gpu_model", "min_driver_branch", "all_pairs_link", "nvlink_peers_min",
                    "nic_max_distance", "gpu_nic_same_numa")

# Named machine profiles. Values an operator passes explicitly override the profile's. The driver floor is the one
# the nvidia_driver role installs (module_utils/nvidia_driver.py), judged by its branch_decision.
PROFILES = {
    # HGX/DGX H100: 8 SXM GPUs on NVSwitch (18 NVLinks each), one 400G NIC per GPU behind the same switch.
    "hgx-h100-8": {
        "gpu_count": 8, "gpu_model": "H100", "min_driver_branch": nvidia_driver.BRANCH_FLOOR,
        "all_pairs_link": "NV18", "nvlink_peers_min": 7, "nic_max_distance": "PXB", "gpu_nic_same_numa": True,
    },
    # HGX/DGX A100: 8 SXM4 GPUs on NVSwitch (12 NVLinks each), a NIC per GPU pair.
    "hgx-a100-8": {
        "gpu_count": 8, "gpu_model": "A100", "min_driver_branch": nvidia_driver.BRANCH_FLOOR,
        "all_pairs_link": "NV12", "nvlink_peers_min": 7, "nic_max_distance": "PXB", "gpu_nic_same_numa": True,
    },
    # DGX-1 V100: hybrid cube-mesh, every GPU has NVLink to 4 peers, the rest are reached over PCIe/SYS.
    "dgx1-v100": {
        "gpu_count": 8, "gpu_model": "V100", "min_driver_branch": nvidia_driver.BRANCH_FLOOR, "nvlink_peers_min": 4,
    },
    # PCIe servers: no NVLink expected, but every GPU must have a NIC on its own NUMA node.
    "pcie": {
        "min_driver_branch": nvidia_driver.BRANCH_FLOOR, "nic_max_distance": "NODE", "gpu_nic_same_numa": True,
    },
}

# Lowest acceptable NCCL all_reduce bus bandwidth per profile, in GB/s, as nccl-tests prints it in the
# busbw column (algbw * 2(n-1)/n) for large messages (1 GiB and up). "node": all GPUs of one node over
# NVLink/NVSwitch; "fleet": a run across nodes over the fabric typical of the profile (a 2-node run should be
# measured with NCCL_ALGO=RING, since tree busbw on two nodes can exceed the wire rate, see
# https://github.com/NVIDIA/nccl-tests/issues/196). The floors sit well below the typical values quoted below,
# so a healthy node passes with margin, and well above what a node gets when NCCL falls back to PCIe, host
# memory or TCP sockets (single-digit to low tens of GB/s), so such a node fails. None: no floor.
BUSBW_FLOORS_GBPS = {
    # HGX/DGX H100, NVLink 4 + NVSwitch, 8x 400G NDR InfiniBand (one ConnectX-7 per GPU).
    # node: ~370 GB/s with NCCL_ALGO=RING and a peak of ~480 GB/s with NVLink SHARP (sjeaugey in
    #   https://github.com/NVIDIA/nccl-tests/issues/212; 476 GB/s called "in the expected range" in
    #   https://github.com/NVIDIA/nccl-tests/issues/290).
    # fleet: 46-48 GB/s per NDR NIC (https://github.com/NVIDIA/nccl-tests/issues/290), about 370-380 GB/s for
    #   8 rails; the DGX H100 figures quoted in https://github.com/NVIDIA/nccl-tests/issues/309 are ~370 GB/s
    #   on one node and ~380 GB/s across nodes.
    "hgx-h100-8": {"node": 250.0, "fleet": 200.0},
    # HGX/DGX A100, NVLink 3 + NVSwitch, 8x 200G HDR InfiniBand.
    # node: 232.5 GB/s (https://github.com/NVIDIA/nccl-tests/issues/175), ~200-208 GB/s on OEM HGX boards
    #   (https://github.com/NVIDIA/nccl-tests/issues/149, https://github.com/NVIDIA/nccl-tests/issues/178).
    # fleet: 24 GB/s per 200G NIC (https://github.com/NVIDIA/nccl-tests/issues/119); 192 GB/s measured on
    #   DGX A100 with 8x 200G (AddyLaddy, quoted in https://github.com/NVIDIA/nccl/issues/1576).
    "hgx-a100-8": {"node": 150.0, "fleet": 120.0},
    # DGX-1 V100, NVLink 2 hybrid cube-mesh (6 links of 25 GB/s per direction per GPU), 4x 100G EDR.
    # node: no public nccl-tests figure was found for it; the floor is well under the NVLink rate and far
    #   over the ~12 GB/s of the PCIe 3.0 x16 fallback.
    # fleet: 48 GB/s for the 4 EDR adapters of a DGX-1, 12.2 GB/s per 100G card (sjeaugey in
    #   https://github.com/NVIDIA/nccl-tests/issues/29).
    "dgx1-v100": {"node": 80.0, "fleet": 30.0},
    # PCIe servers: GPUs talk through PCIe switches or the CPUs, so the node figure depends on the board:
    #   28 GB/s on 8 and 35 GB/s on 4 RTX 5090, which a maintainer calls good for a PCIe system
    #   (https://github.com/NVIDIA/nccl/issues/1639). The floor only catches GPUs on narrow or downtrained
    #   links; the fabric is not known, so no fleet floor.
    "pcie": {"node": 5.0, "fleet": None},
}
BUSBW_SCOPES = ("node", "fleet")


def busbw_floor(profile, scope="node"):
    """The all_reduce busbw floor in GB/s of ``profile`` for ``scope`` ("node" or "fleet").

    0.0 when the profile, the scope or the floor is not known (no floor to enforce).
    """
    floor = BUSBW_FLOORS_GBPS.get(profile or "", {}).get(scope)
    return float(floor) if floor else 0.0


def link_rank(code):
    """Return (class index, NVLink count) for a printed link code; lower class index is closer."""
    code = (code or "").upper()
    if code.startswith("NV"):
        count = code[2:]
        return 0, int(count) if count.isdigit() else 0
    if code == "SOC":
        code = "SYS"
    if code in LINK_CLASSES:
        return LINK_CLASSES.index(code), 0
    return len(LINK_CLASSES), 0


def link_meets(code, expected):
    """True when the printed link ``code`` is at least as good as ``expected`` (NV, NV18, PIX, ..)."""
    have_class, have_count = link_rank(code)
    want_class, want_count = link_rank(expected)
    if have_class != want_class:
        return have_class < want_class
    return have_count >= want_count


def is_nvlink(code):
    return link_rank(code)[0] == 0


def resolve_expectations(profile=None, **explicit):
    """Merge a named profile with explicit values (explicit wins; None means 'not given')."""
    if profile is not None and profile not in PROFILES:
        raise ValueError("unknown profile %r; known profiles: %s" % (profile, ", ".join(sorted(PROFILES))))
    merged = dict(PROFILES.get(profile, {})) if profile else {}
    for key in EXPECTATION_KEYS:
        if explicit.get(key) is not None:
            merged[key] = explicit[key]
    return merged


def validate_expectations(expectations):
    """Return a list of readable problems with the expectation values themselves."""
    problems = []
    link = expectations.get("all_pairs_link")
    if link is not None and not LINK_EXPECTATION.match(str(link)):
        problems.append("all_pairs_link %r is not one of NV, NV<count>, PIX, PXB, PHB, NODE, SYS" % (link,))
    distance = expectations.get("nic_max_distance")
    if distance is not None and distance not in NIC_DISTANCES:
        problems.append("nic_max_distance %r is not one of %s" % (distance, ", ".join(NIC_DISTANCES)))
    model = expectations.get("gpu_model")
    if model is not None:
        try:
            re.compile(model)
        except re.error as exc:
            problems.append("gpu_model %r is not a valid regular expression: %s" % (model, exc))
    for key in ("gpu_count", "nvlink_peers_min", "min_driver_branch"):
        value = expectations.get(key)
        if value is not None and value < 0:
            problems.append("%s must not be negative (got %s)" % (key, value))
    return problems


def asks_for_gpus(expectations):
    """True when the expectations only make sense on a node with GPUs."""
    for key in EXPECTATION_KEYS:
        value = expectations.get(key)
        if key == "gpu_count":
            if value:
                return True
        elif key == "gpu_nic_same_numa":
            if value:
                return True
        elif value is not None:
            return True
    return False


def nearest_nic(topology, gpu):
    """(NIC column, printed link) of the NIC closest to ``gpu``, or (None, None) without NICs."""
    row = topology.get("links", {}).get(gpu, {})
    best = (None, None)
    for nic in topology.get("nics", []):
        code = row.get(nic)
        if code is None:
            continue
        if best[0] is None or link_rank(code) < link_rank(best[1]):
            best = (nic, code)
    return best


def nic_label(topology, nic):
    name = topology.get("nic_names", {}).get(nic)
    return "%s (%s)" % (name, nic) if name and name != nic else nic


def nvlink_peers(topology, gpu):
    row = topology.get("links", {}).get(gpu, {})
    return sum(1 for other in topology.get("gpu_columns", []) if other != gpu and is_nvlink(row.get(other)))


def check(topology, expectations):
    """Return one readable line per violated expectation (empty list when all hold)."""
    violations = []
    gpu_count = topology.get("gpu_count", 0)
    wanted = expectations.get("gpu_count")
    if gpu_count == 0:
        if asks_for_gpus(expectations):
            reason = topology.get("reason") or "no GPU found"
            if wanted:
                violations.append("gpu_count: found 0, expected %d (%s)" % (wanted, reason))
            else:
                violations.append("no GPU found, but GPU expectations were given (%s)" % reason)
        return violations

    if wanted is not None and gpu_count != wanted:
        violations.append("gpu_count: found %d, expected %d" % (gpu_count, wanted))

    model = expectations.get("gpu_model")
    if model is not None:
        pattern = re.compile(model)
        for gpu in topology.get("gpus", []):
            if not pattern.search(gpu.get("name") or ""):
                violations.append("GPU%s: model %r does not match %r" % (gpu.get("index"), gpu.get("name"), model))

    branch_min = expectations.get("min_driver_branch")
    if branch_min is not None:
        version = topology.get("driver_version")
        branch = nvidia_driver.branch_decision(None, installed_version=version, floor=branch_min)
        if branch["installed"] is None:
            violations.append("driver: version unknown, expected branch %d or newer" % branch_min)
        elif not branch["installed_ok"]:
            violations.append("driver: %s is branch %s, expected branch %d or newer"
                              % (version, branch["installed"], branch_min))

    columns = topology.get("gpu_columns", [])
    links = topology.get("links", {})
    needs_matrix = any(expectations.get(key) for key in
                       ("all_pairs_link", "nvlink_peers_min", "nic_max_distance", "gpu_nic_same_numa"))
    if needs_matrix and not links:
        violations.append("topology: no link matrix from 'nvidia-smi topo -m' (%s)"
                          % (topology.get("topology_error") or "not available"))
        return violations

    expected_link = expectations.get("all_pairs_link")
    if expected_link:
        for position, first in enumerate(columns):
            for second in columns[position + 1:]:
                code = links.get(first, {}).get(second)
                if not link_meets(code, expected_link):
                    violations.append("%s<->%s: %s, expected %s" % (first, second, code, expected_link))

    peers_min = expectations.get("nvlink_peers_min")
    if peers_min:
        for gpu in columns:
            peers = nvlink_peers(topology, gpu)
            if peers < peers_min:
                violations.append("%s: NVLink to %d peers, expected at least %d" % (gpu, peers, peers_min))

    distance = expectations.get("nic_max_distance")
    same_numa = expectations.get("gpu_nic_same_numa")
    if (distance or same_numa) and not topology.get("nics"):
        violations.append("no NIC in the topology, expected one %s every GPU"
                          % ("within %s of" % distance if distance else "on the NUMA node of"))
        return violations
    for gpu in columns:
        nic, code = nearest_nic(topology, gpu)
        if distance and not link_meets(code, distance):
            violations.append("%s: nearest NIC %s at %s, expected %s or closer"
                              % (gpu, nic_label(topology, nic), code, distance))
        if same_numa and link_rank(code)[0] >= LINK_CLASSES.index("SYS"):
            violations.append("%s: no NIC on its NUMA node (nearest %s at %s)" % (gpu, nic_label(topology, nic), code))
    return violations


def _span(codes):
    ordered = sorted(set(codes), key=link_rank)
    if len(ordered) == 1:
        return ordered[0]
    # best first: for NVLink the larger count is better
    best = sorted(ordered, key=lambda code: (link_rank(code)[0], -link_rank(code)[1]))
    return "%s to %s" % (best[0], best[-1])


def summary(topology):
    """One line such as ``8x NVIDIA H100 80GB HBM3, all pairs NV18, 8 NICs at PIX``."""
    if not topology.get("gpu_count"):
        return "no GPU: %s" % (topology.get("reason") or "none found")
    names = []
    counts = {}
    for gpu in topology.get("gpus", []):
        name = gpu.get("name") or "GPU"
        if name not in counts:
            names.append(name)
            counts[name] = 0
        counts[name] += 1
    parts = [", ".join("%dx %s" % (counts[name], name) for name in names)]

    columns = topology.get("gpu_columns", [])
    links = topology.get("links", {})
    if links and len(columns) > 1:
        pair_codes = [links[a][b] for i, a in enumerate(columns) for b in columns[i + 1:]]
        span = _span(pair_codes)
        parts.append(("all pairs %s" if " to " not in span else "pairs %s") % span)
    if links:
        nics = topology.get("nics", [])
        if nics:
            nearest = [nearest_nic(topology, gpu)[1] for gpu in columns]
            nearest = [code for code in nearest if code]
            noun = "NIC" if len(nics) == 1 else "NICs"
            parts.append("%d %s at %s" % (len(nics), noun, _span(nearest)) if nearest else "%d %s" % (len(nics), noun))
        else:
            parts.append("no NIC")
    return ", ".join(parts)


def _numa_node(value):
    return int(value) if value is not None and str(value).isdigit() else None


def assemble(query_gpus, topo=None, nvlink=None, reason=None, topology_error=None):
    """Build the ``gpu_topology`` dict from parsed query-gpu rows, topo matrix and nvlink status.

    ``topo`` is the parse_topo_matrix() result or None, ``nvlink`` the parse_nvlink_status() list or
    None. ``reason`` says why there is no GPU; ``topology_error`` why the matrix is missing.
    """
    topo = topo or {}
    nvlink_by_index = dict((entry["index"], entry) for entry in (nvlink or []))
    topology = {
        "gpu_count": len(query_gpus),
        "reason": reason if not query_gpus else None,
        "driver_version": query_gpus[0]["driver_version"] if query_gpus else None,
        "gpu_columns": list(topo.get("gpus", [])),
        "nics": list(topo.get("nics", [])),
        "nic_names": dict(topo.get("nic_names", {})),
        "links": topo.get("links", {}),
        "affinity_columns": list(topo.get("columns", [])),
        "topology_error": topology_error,
        "gpus": [],
    }
    for gpu in query_gpus:
        column = "GPU%d" % gpu["index"]
        entry = dict(gpu)
        numa = topo.get("numa_affinity", {}).get(column)
        entry["cpu_affinity"] = topo.get("cpu_affinity", {}).get(column)
        entry["numa_affinity"] = numa
        entry["numa_node"] = _numa_node(numa)
        nic, code = nearest_nic(topology, column) if column in topology["links"] else (None, None)
        entry["nearest_nic"] = topology["nic_names"].get(nic, nic) if nic else None
        entry["nearest_nic_link"] = code
        entry["nvlink_peers"] = nvlink_peers(topology, column) if column in topology["links"] else 0
        status = nvlink_by_index.get(gpu["index"])
        entry["nvlinks_active"] = status["links_active"] if status else 0
        entry["nvlinks_inactive"] = status["links_inactive"] if status else 0
        topology["gpus"].append(entry)
    topology["nic_devices"] = [
        {"name": nic, "device": topology["nic_names"].get(nic, nic)} for nic in topology["nics"]
    ]
    topology["summary"] = summary(topology)
    return topology
