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

``parse_nvlink_status`` reads ``nvidia-smi nvlink -s``: GPU lines with the ``(UUID: ...)`` part or with the name
alone (the DGX-1 V100 output of the fixtures), ``Link N: 25.781 GB/s`` (NVLink 2) to ``53.125 GB/s`` (NVLink 5),
whole numbers such as ``25 GB/s`` included, ``Link N: <inactive>``, and the single ``NVML: Unable to retrieve NVLink
information as all links are inActive`` line newer drivers print for a GPU whose links are all down.

``parse_fabric`` reads the per-GPU ``Fabric`` section of ``nvidia-smi -q`` (R550: State, Status, CliqueId,
ClusterUUID, Health/Bandwidth; R570+: Health/Summary, Route Recovery ..., absent before), and ``fabric_verdict``
judges it for a node with or without NVSwitches.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
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


def first_line(*texts):
    """The first non-empty line of the first text that has one (stripped), or ''."""
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def find_nvidia_smi(module, nvidia_smi_path):
    """The nvidia-smi to run (an absolute path that is executable, or a name on PATH), or None when there is none."""
    if os.path.isabs(nvidia_smi_path):
        return nvidia_smi_path if os.access(nvidia_smi_path, os.X_OK) else None
    return module.get_bin_path(nvidia_smi_path)


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
        keys = [key for _unused, _unused, key in positions]
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
    for _unused, key in AFFINITY_COLUMNS:
        result[key] = {}
    for gpu in gpus:
        values = extras.get(gpu, [])
        for _unused, key in AFFINITY_COLUMNS:
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


# The name never spans a "(UUID:" part: a GPU line with text after its UUID is not one of nvlink -s.
NVLINK_GPU_LINE = re.compile(r"^\s*GPU\s+(\d+):\s*(\S(?:(?!\(UUID:).)*?)(?:\s*\(UUID:\s*([^)]*)\))?\s*$")
NVLINK_LINK_LINE = re.compile(r"^\s*Link\s+(\d+):\s*(.*?)\s*$")
NVLINK_SPEED = re.compile(r"^([0-9.]+)\s*GB/s$")
NVLINK_ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)


def parse_nvlink_status(text):
    """Parse ``nvidia-smi nvlink -s`` (or ``--status``, with or without ``-i``).

    Returns a list of dicts, one per GPU printed: index, name, uuid (None where the GPU line carries the name
    alone, without a ``(UUID: ...)`` part), links_active, links_inactive and link_speeds_gbps ({link number as string:
    GB/s, or None when the link is inactive}), and all_links_inactive (NVML printed "all links are inActive" for
    the GPU instead of its links). Other lines (an elided ``....``/``...``/``[snip]``, a prompt or the command,
    blank lines, and the ``Link N, <capability>: true`` lines of ``nvlink -c``) are skipped.
    """
    gpus = []
    current = None
    for line in _clean_lines(text):
        gpu = NVLINK_GPU_LINE.match(line)
        if gpu:
            current = {
                "index": int(gpu.group(1)),
                "name": gpu.group(2),
                "uuid": gpu.group(3).strip() if gpu.group(3) is not None else None,
                "links_active": 0,
                "links_inactive": 0,
                "link_speeds_gbps": {},
                "all_links_inactive": False,
            }
            gpus.append(current)
            continue
        if current is not None and NVLINK_ALL_INACTIVE.search(line):
            current["all_links_inactive"] = True
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


# ---------------------------------------------------------------------------------------------------------------
# Fabric state (nvidia-smi -q)

Q_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
Q_FIELD = re.compile(r"^(\s*)([^:]+?)\s*:\s?(.*?)\s*$")
FABRIC_KEYS = {
    "state": "state", "status": "status", "cliqueid": "clique_id", "clique id": "clique_id",
    "clusteruuid": "cluster_uuid", "cluster uuid": "cluster_uuid",
}
HEALTH_KEYS = {
    "summary": "summary", "bandwidth": "bandwidth", "route recovery in progress": "route_recovery_in_progress",
    "route unhealthy": "route_unhealthy", "access timeout recovery": "access_timeout_recovery",
}
# What nvidia-smi prints where the GPU or driver has no fabric state to report.
FABRIC_NOT_REPORTED = ("", "N/A", "Not Supported", "[N/A]", "[Not Supported]")
FABRIC_MANAGER_PENDING = ("In Progress", "Not Started")


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _key(name, known):
    low = name.strip().lower()
    return known.get(low, re.sub(r"[^a-z0-9]+", "_", low).strip("_"))


def _new_gpu(position, bus_id=None):
    return {"index": position, "bus_id": bus_id, "name": None, "uuid": None, "fabric": False, "state": None,
            "status": None, "clique_id": None, "cluster_uuid": None, "health": {}}


def parse_fabric(text):
    """Parse the ``Fabric`` section of every GPU in ``nvidia-smi -q`` (or ``-a``).

    Returns one dict per GPU in printed order (nvidia-smi's index order): index (position), bus_id, name, uuid,
    fabric (whether the GPU printed a Fabric section), state, status, clique_id, cluster_uuid (the printed strings,
    None where not printed) and health ({summary, bandwidth, route_recovery_in_progress, route_unhealthy,
    access_timeout_recovery, ...} as printed, {} without a Health subsection).

    It also reads a pasted ``grep -A/-C ... Fabric`` excerpt: each Fabric block without a ``GPU <bus id>`` header
    becomes the next GPU, with bus_id None.
    """
    gpus = []
    current = None
    section = None  # (indent of the "Fabric" line, gpu) while inside a Fabric section
    health_indent = None
    for raw in _clean_lines(text):
        line = raw.expandtabs(4).rstrip()
        header = Q_GPU_HEADER.match(line)
        if header:
            current = _new_gpu(len(gpus), header.group(1))
            gpus.append(current)
            section = None
            continue
        stripped = line.strip()
        if not stripped:
            continue
        if stripped == "--":
            section = None
            continue
        indent = _indent(line)
        if section is not None and indent <= section[0]:
            section = None
        if stripped == "Fabric":
            if current is None or current["fabric"]:
                current = _new_gpu(len(gpus))
                gpus.append(current)
            current["fabric"] = True
            section = (indent, current)
            health_indent = None
            continue
        field = Q_FIELD.match(line)
        if section is not None:
            gpu = section[1]
            if stripped == "Health":
                health_indent = indent
                continue
            if health_indent is not None and indent <= health_indent:
                health_indent = None
            if field:
                if health_indent is not None:
                    gpu["health"][_key(field.group(2), HEALTH_KEYS)] = field.group(3)
                else:
                    gpu[_key(field.group(2), FABRIC_KEYS)] = field.group(3)
            continue
        if current is not None and field and current["fabric"] is False:
            name = field.group(2).strip()
            if name == "Product Name":
                current["name"] = field.group(3)
            elif name == "GPU UUID":
                current["uuid"] = field.group(3)
    return gpus


def _label(gpu):
    label = "GPU%d" % gpu["index"]
    return label + (" (%s)" % gpu["bus_id"] if gpu.get("bus_id") else "")


def _reported(gpu):
    return gpu.get("fabric") and (gpu.get("state") or "") not in FABRIC_NOT_REPORTED


def fabric_verdict(gpus, nvswitch, gpu_count=None, reason="", error=""):
    """Verdict of the NVSwitch fabric from parse_fabric()'s list.

    ``nvswitch`` is the node's gpufleet_node.nvswitch (None: unknown), ``gpu_count``/``reason`` what nvidia-smi
    reported (0 with its reason on a GPU-less node), ``error`` why ``nvidia-smi -q`` could not be read.

    Returns {"status": "passed"|"failed"|"skipped", "reason": str, "detail": {...}}, the shape of a validate step:
    skipped without a GPU, without NVSwitches, or where no GPU reports a fabric state (no Fabric section, or N/A);
    failed when nvidia-smi -q errored, or a GPU is not State Completed / Status Success (or its fabric health
    summary says Unhealthy); passed otherwise.
    """
    gpus = gpus or []
    detail = {
        "nvswitch": nvswitch,
        "gpus": [{"gpu": _label(gpu), "state": gpu.get("state"), "status": gpu.get("status"),
                  "clique_id": gpu.get("clique_id"), "cluster_uuid": gpu.get("cluster_uuid"),
                  "health": gpu.get("health") or {}} for gpu in gpus],
    }

    def result(status, text):
        return {"status": status, "reason": text, "detail": detail}

    if gpu_count is not None and int(gpu_count) == 0:
        return result("skipped", "no NVIDIA GPU" + (": " + reason if reason else ""))
    if nvswitch is None:
        return result("skipped", "not known whether the node has NVSwitches (gpufleet_node.nvswitch not set)")
    if not nvswitch:
        return result("skipped", "no NVSwitch on the node: no NVLink fabric to register")
    if error:
        return result("failed", error)
    if not any(gpu.get("fabric") for gpu in gpus):
        return result("skipped", "nvidia-smi -q prints no Fabric section (driver without the fabric state report)")
    reported = [gpu for gpu in gpus if _reported(gpu)]
    if not reported:
        return result("skipped", "every GPU reports fabric state N/A (GPU or driver without a fabric state, "
                      "as on A100 NVSwitch boards)")

    problems = []
    pending = False
    for gpu in gpus:
        state, status = gpu.get("state"), gpu.get("status")
        summary = (gpu.get("health") or {}).get("summary")
        if not _reported(gpu):
            problems.append("%s: no fabric state (%s)" % (_label(gpu), state or "no Fabric section"))
        elif state in FABRIC_MANAGER_PENDING:
            pending = True
            problems.append("%s: %s" % (_label(gpu), state))
        elif state != "Completed":
            problems.append("%s: state %s" % (_label(gpu), state))
        elif status != "Success":
            problems.append("%s: Completed with status %s" % (_label(gpu), status))
        elif summary == "Unhealthy":
            health = gpu.get("health") or {}
            bad = ", ".join("%s %s" % (key, value) for key, value in sorted(health.items()) if key != "summary")
            problems.append("%s: Completed/Success but fabric health Unhealthy%s"
                            % (_label(gpu), " (%s)" % bad if bad else ""))
    if problems:
        text = "; ".join(problems)
        if pending:
            text += (" - the fabric manager has not finished registering the GPUs with the NVSwitch fabric or is "
                     "not running (systemctl status nvidia-fabricmanager)")
        return result("failed", text)

    cliques = sorted(set(str(gpu.get("clique_id")) for gpu in gpus if gpu.get("clique_id") not in (None, "N/A")))
    clusters = sorted(set(gpu.get("cluster_uuid") for gpu in gpus if gpu.get("cluster_uuid") not in (None, "N/A")))
    text = "%d GPU(s): fabric Completed/Success" % len(gpus)
    if cliques:
        text += ", clique %s" % "/".join(cliques)
    if clusters:
        text += ", cluster %s" % "/".join(clusters)
    return result("passed", text)


# --query-compute-apps properties as nvidia-smi prints them in a header (--help-query-compute-apps names the
# aliases: "process_name" or "name", "used_gpu_memory" or "used_memory"), mapped to one key each.
COMPUTE_APPS_ALIASES = {
    "name": "process_name",
    "used_memory": "used_gpu_memory",
}
COMPUTE_APPS_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")


def _compute_apps_key(field):
    name = COMPUTE_APPS_HEADER_UNIT.sub("", field.strip()).strip().lower()
    return COMPUTE_APPS_ALIASES.get(name, name)


def parse_compute_apps(csv_text, fields=("pid", "process_name", "used_memory")):
    """Parse ``nvidia-smi --query-compute-apps=<fields> --format=csv[,noheader]``.

    ``fields`` is the property list the command asked for, in order; a header line (``--format=csv``) takes
    precedence over it. The process name is what workloads choose (it may hold commas), so it is read
    outside-in: the columns left of it from the left, the columns right of it from the right.

    Returns a list of dicts, one per compute process in the printed order: pid (int), process_name, used_memory_mib
    (int, or None where the driver cannot say: ``[N/A]`` on Windows WDDM, ``[Insufficient Permissions]``), and
    every other asked-for property as printed (gpu_uuid, ...). An empty text (or a header alone) is an idle node.

    Raises ValueError for a line that does not fit, so that output nobody can read never passes as idle.
    """
    keys = [_compute_apps_key(field) for field in fields]
    processes = []
    for raw in _clean_lines(csv_text):
        line = raw.strip()
        if not line:
            continue
        pieces = line.split(",")
        parts = [piece.strip() for piece in pieces]
        header_keys = [_compute_apps_key(part) for part in parts]
        if "pid" in header_keys and not any(part.isdigit() for part in parts):
            keys = header_keys
            continue
        if "pid" not in keys:
            raise ValueError("the query asks for no pid column: %s" % ", ".join(fields))
        if "process_name" in keys:
            at = keys.index("process_name")
            after = len(keys) - at - 1
            if len(parts) < len(keys):
                raise ValueError("not a --query-compute-apps line (%s): %r" % (", ".join(keys), line))
            values = parts[:at] + [",".join(pieces[at:len(pieces) - after]).strip()] + parts[len(parts) - after:]
        else:
            values = parts
        if len(values) != len(keys):
            raise ValueError("not a --query-compute-apps line (%s): %r" % (", ".join(keys), line))
        row = dict(zip(keys, values))
        if not row["pid"].isdigit():
            raise ValueError("no process id in the --query-compute-apps line %r" % line)
        process = {"pid": int(row.pop("pid")), "process_name": row.pop("process_name", "")}
        memory = row.pop("used_gpu_memory", "").split()
        process["used_memory_mib"] = int(memory[0]) if memory and memory[0].isdigit() else None
        process.update(row)
        processes.append(process)
    return processes


def compute_apps_summary(processes):
    """One line per process for an operator: ``pid 10309 ./gpu_burn 28234 MiB`` (``memory n/a`` when unknown)."""
    return [
        "pid %d %s %s" % (
            process["pid"], process["process_name"] or "(no name)",
            "%d MiB" % process["used_memory_mib"] if process["used_memory_mib"] is not None else "memory n/a")
        for process in processes
    ]
