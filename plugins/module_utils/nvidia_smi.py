# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure parsers for nvidia-smi text output. No Ansible import here.

``parse_topo_matrix`` reads ``nvidia-smi topo -m`` as printed by every driver generation we have met:

* R4xx: ``CPU Affinity`` only, HCAs as ``mlx5_N`` columns;
* R450-R525: ``NUMA Affinity`` added;
* R535 and newer: ``GPU NUMA ID`` added, NICs as ``NIC0..`` with a ``NIC Legend`` mapping them to devices.

It also takes the text the way operators paste it into tickets: tabs or re-spaced columns, a common
indentation, ANSI underline escapes, a prompt line or a markdown fence around it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Trailing columns nvidia-smi prints after the device columns, as (printed name, key) in print order.
AFFINITY_COLUMNS = (
    ("CPU Affinity", "cpu_affinity"),
    ("NUMA Affinity", "numa_affinity"),
    ("GPU NUMA ID", "gpu_numa_id"),
)

LINK_CODE = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|N/A)$")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
NIC_LEGEND_LINE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
GPU_NAME = re.compile(r"^GPU\d+$")


def _clean_lines(text):
    return ANSI_ESCAPE.sub("", text or "").replace("\r", "").splitlines()


def _split_header(line):
    """Split a header line into (device names, affinity column keys in order)."""
    rest = line.strip()
    positions = []
    for printed, key in AFFINITY_COLUMNS:
        at = rest.find(printed)
        if at >= 0:
            positions.append((at, printed, key))
    positions.sort()
    if positions:
        devices = rest[:positions[0][0]].split()
        keys = [key for _, _, key in positions]
    else:
        devices = rest.split()
        keys = []
    return devices, keys


def _is_header(tokens):
    return len(tokens) >= 2 and tokens[0] == "GPU0" and not LINK_CODE.match(tokens[1])


def parse_topo_matrix(text):
    """Parse ``nvidia-smi topo -m``.

    Returns a dict:
      devices: column names in order (GPU0.., NIC0.. or mlx5_0.. as printed)
      gpus / nics: the GPU columns and the other columns
      links: links[a][b] = printed code (X, NV18, PIX, PXB, PHB, NODE, SYS, ...)
      cpu_affinity / numa_affinity / gpu_numa_id: {GPUn: printed string, or None when the column is absent}
      columns: which affinity columns the driver printed (cpu_affinity, numa_affinity, gpu_numa_id)
      nic_names: {"NIC0": "mlx5_0", ...} from the NIC legend ({} when there is none)

    Raises ValueError when no matrix is found or a row does not fit the header.
    """
    lines = _clean_lines(text)
    header_at = None
    devices = []
    keys = []
    for number, line in enumerate(lines):
        if _is_header(line.split()):
            header_at = number
            devices, keys = _split_header(line)
            break
    if header_at is None:
        raise ValueError("no 'nvidia-smi topo -m' matrix found (no header line starting with GPU0)")

    count = len(devices)
    known = set(devices)
    links = {}
    extras = {}
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or tokens[0] not in known or tokens[0] in links:
            continue
        name = tokens[0]
        codes = tokens[1:1 + count]
        if len(codes) < count or not all(LINK_CODE.match(code) for code in codes):
            raise ValueError("row %s does not have %d link codes: %r" % (name, count, line.strip()))
        links[name] = dict(zip(devices, codes))
        extras[name] = tokens[1 + count:]
        if len(links) == count:
            break

    missing = [name for name in devices if name not in links]
    if missing:
        raise ValueError("no matrix row for %s" % ", ".join(missing))

    gpus = [name for name in devices if GPU_NAME.match(name)]
    result = {
        "devices": devices,
        "gpus": gpus,
        "nics": [name for name in devices if not GPU_NAME.match(name)],
        "links": links,
        "columns": keys,
        "nic_names": {},
    }
    for _, key in AFFINITY_COLUMNS:
        result[key] = {}
    for gpu in gpus:
        values = extras.get(gpu, [])
        for _, key in AFFINITY_COLUMNS:
            result[key][gpu] = None
        for position, key in enumerate(keys):
            result[key][gpu] = values[position] if position < len(values) else None

    in_legend = False
    for line in lines[header_at + 1:]:
        if line.strip().startswith("NIC Legend"):
            in_legend = True
            continue
        if in_legend:
            match = NIC_LEGEND_LINE.match(line)
            if match:
                result["nic_names"][match.group(1)] = match.group(2)
            elif line.strip() and not line.strip().startswith("```"):
                in_legend = False
    return result


def parse_query_gpu(csv_text):
    """Parse ``--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version
    --format=csv,noheader,nounits``.

    Returns a list of dicts (index, name, uuid, pci_bus_id, memory_total_mib, driver_version) in the
    printed order. Tolerates a header line, units (``81559 MiB``) and commas inside the name.
    """
    gpus = []
    for raw in _clean_lines(csv_text):
        line = raw.strip()
        if not line or line.lower().startswith("index"):
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 6 or not parts[0].isdigit():
            raise ValueError("not a query-gpu line (index, name, uuid, pci.bus_id, memory.total, "
                             "driver_version): %r" % line)
        memory = parts[-2].split()[0] if parts[-2] else ""
        gpus.append({
            "index": int(parts[0]),
            "name": ", ".join(parts[1:-4]),
            "uuid": parts[-4],
            "pci_bus_id": parts[-3],
            "memory_total_mib": int(memory) if memory.isdigit() else None,
            "driver_version": parts[-1],
        })
    return gpus


NVLINK_GPU_LINE = re.compile(r"^\s*GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)]*)\)\s*$")
NVLINK_LINK_LINE = re.compile(r"^\s*Link\s+(\d+):\s*(.*?)\s*$")
NVLINK_SPEED = re.compile(r"^([0-9.]+)\s*GB/s$")


def parse_nvlink_status(text):
    """Parse ``nvidia-smi nvlink -s``.

    Returns a list of dicts, one per GPU printed: index, name, uuid, links_active, links_inactive and
    link_speeds_gbps ({link number as string: GB/s, or None when the link is inactive}). Lines that
    belong to neither a GPU nor a link (an elided ``....``, NVML notes) are skipped.
    """
    gpus = []
    current = None
    for line in _clean_lines(text):
        gpu = NVLINK_GPU_LINE.match(line)
        if gpu:
            current = {
                "index": int(gpu.group(1)),
                "name": gpu.group(2),
                "uuid": gpu.group(3).strip(),
                "links_active": 0,
                "links_inactive": 0,
                "link_speeds_gbps": {},
            }
            gpus.append(current)
            continue
        link = NVLINK_LINK_LINE.match(line)
        if link and current is not None:
            speed = NVLINK_SPEED.match(link.group(2))
            if speed:
                current["links_active"] += 1
                current["link_speeds_gbps"][link.group(1)] = float(speed.group(1))
            else:
                current["links_inactive"] += 1
                current["link_speeds_gbps"][link.group(1)] = None
    return gpus
