# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure readers for the output of a job run with ``NCCL_DEBUG=INFO``. No Ansible import here.

``parse_nccl_debug`` takes stdout and stderr of such a run (torchrun, mpirun, nccl-tests) as one text and
says which transports NCCL chose. Lines look like ``host:pid:tid [rank] NCCL INFO ...``; launchers may
put a tag in front (``[1,26]<stdout>:``, ``[155] ``, a timestamp), so every pattern is searched anywhere
in the line. The wordings read here, all seen in published logs (see tests/fixtures/nccl):

* version: ``NCCL version 2.18.1+cuda12.1``, printed bare by rank 0 before NCCL 2.22 and as an INFO line
  from 2.22 on;
* network: channel lines ``... [send] via NET/IB/0/GDRDMA``, ``via NET/Socket/3``,
  ``via NET/AWS Libfabric/1/GDRDMA``, ``via NET/IBext_v8/4`` (NCCL 2.4 says ``Ring 00 : 7 -> 8 [send] via
  ...``); ``Using network IB|IBext_v8|Socket|AWS Libfabric|Libfabric`` (``Using internal Network IB``
  in NCCL 2.3); the device lists ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...``,
  ``NET/IB: [0] mlx5_1:1/IB`` (NCCL 2.3), ``NET/Socket : Using [0]eth0:..`` and ``NET/OFI ...``;
* intra-node: ``via P2P/IPC``, ``via P2P/CUMEM``, ``via P2P/direct pointer``, ``via SHM/direct/direct``;
  NVLink SHARP counts as used only on ``Connected NVLS``, ``NVLS comm 0x..`` or ``N nvls channels`` with
  N > 0 (``NVLS multicast support is available`` is a capability, not a connection);
* ranks: ``comm 0x.. rank 0 nranks 16 cudaDev ..``, ``rank 0 nRanks 8 nNodes 1``, ``rank 0 nranks 8``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

INFO = "NCCL INFO"
WARN = "NCCL WARN"

VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
# 'via NET/<transport>/<device>[(<merged>)][/GDRDMA][/Shared]'; transport names may hold a space.
NET_CHANNEL = re.compile(r"\bvia NET/(?P<name>[A-Za-z][\w .-]*?)/(?P<dev>\d+)(?P<rest>\S*)")
USING_NETWORK = re.compile(r"\bUsing (?:internal )?[Nn]etwork (?!plugin)(?P<name>\S.*?)\s*$")
IB_LIST = re.compile(r"\bNET/IB\s*:?\s*(?:Using\s*)?(?P<list>\[\d+\].*)$")
IB_DEVICE = re.compile(r"\[\d+\]\s*\{?(?P<devs>[\w.:,-]+?)\}?/(?:IB|RoCE)\b")
SOCKET_LIST = re.compile(r"\bNET/Socket\s*:\s*Using\s*\[\d+\]")
OFI_LINE = re.compile(r"\bNET/OFI\b")
INTRA_CHANNEL = re.compile(r"\bvia (P2P|SHM)/")
NVLS_USED = re.compile(r"\bConnected NVLS\b|\bNVLS comm 0x|\b([1-9]\d*) nvls channels\b")
NRANKS = re.compile(r"\brank \d+ nranks (\d+)\b", re.IGNORECASE)
NATURAL_PART = re.compile(r"(\d+)")

NET_KINDS = ("IB", "Socket", "OFI")
INTRA_KINDS = ("NVLS", "P2P", "SHM")


def net_kind(name):
    """Map a transport name as NCCL prints it to "IB", "Socket" or "OFI"; other names come back as printed.

    ``IB``, ``IBext``, ``IBext_v8`` (the HPC-X RDMA/SHARP plugin) are InfiniBand verbs, RoCE included;
    ``AWS Libfabric``, ``Libfabric``, ``OFI`` and EFA are the libfabric plugin.
    """
    name = (name or "").strip()
    low = name.lower()
    if not low:
        return None
    if low.startswith("ib"):
        return "IB"
    if low.startswith("socket"):
        return "Socket"
    if "libfabric" in low or low.startswith("ofi") or low.startswith("efa"):
        return "OFI"
    return name


def _natural_key(text):
    return [int(part) if part.isdigit() else part for part in NATURAL_PART.split(text)]


def _most_common(kinds):
    """The kind seen most often; on a tie the one seen first. None for an empty list."""
    best, best_count = None, 0
    for kind in kinds:
        count = kinds.count(kind)
        if count > best_count:
            best, best_count = kind, count
    return best


def _clean_lines(text):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return (text or "").replace("\r", "").splitlines()


def parse_nccl_debug(text):
    """Read ``NCCL_DEBUG=INFO`` output. Returns a dict:

    ``version`` ("2.18.1" or None), ``net`` ("IB", "Socket", "OFI", another plugin's name as printed,
    or None), ``ib_devices`` (``dev:port`` of the HCAs NCCL listed, unique, in natural order),
    ``gdrdma`` (True when a NET channel line ends in GDRDMA, False when NET channel lines exist without
    it, None without NET channel lines), ``intra`` (sorted subset of NVLS, P2P, SHM), ``warnings``
    (number of ``NCCL WARN`` lines), ``nranks`` (largest communicator seen, or None) and
    ``info_lines`` (number of ``NCCL INFO`` lines; 0 means NCCL_DEBUG=INFO was not in effect).

    The network is taken from the strongest evidence present: the NET channel lines (what connections
    actually used), else the ``Using network`` lines, else the device lists (an IB list with devices
    before a NET/OFI line before a socket list, because NCCL 2.4 and 2.5 print the socket list on every
    run, and the OFI plugin prints its lines even when it then fails to initialise).
    """
    result = {
        "version": None, "net": None, "ib_devices": [], "gdrdma": None, "intra": [], "warnings": 0,
        "nranks": None, "info_lines": 0,
    }
    channel_nets, using_nets = [], []
    listed = set()
    ib_devices = set()
    intra = set()
    gdr_seen = net_channel_seen = False
    for line in _clean_lines(text):
        if result["version"] is None:
            match = VERSION.search(line)
            if match:
                result["version"] = match.group(1)
        if WARN in line:
            result["warnings"] += 1
        if INFO not in line:
            continue
        result["info_lines"] += 1

        match = NET_CHANNEL.search(line)
        if match:
            net_channel_seen = True
            channel_nets.append(net_kind(match.group("name")))
            if "GDRDMA" in match.group("rest").split("/"):
                gdr_seen = True
        match = USING_NETWORK.search(line)
        if match:
            using_nets.append(net_kind(match.group("name")))

        match = IB_LIST.search(line)
        if match:
            for device in IB_DEVICE.finditer(match.group("list")):
                for name in device.group("devs").split(","):
                    if name:
                        ib_devices.add(name)
                        listed.add("IB")
        if SOCKET_LIST.search(line):
            listed.add("Socket")
        if OFI_LINE.search(line):
            listed.add("OFI")

        match = INTRA_CHANNEL.search(line)
        if match:
            intra.add(match.group(1))
        if NVLS_USED.search(line):
            intra.add("NVLS")

        match = NRANKS.search(line)
        if match:
            nranks = int(match.group(1))
            if result["nranks"] is None or nranks > result["nranks"]:
                result["nranks"] = nranks

    if channel_nets:
        result["net"] = _most_common(channel_nets)
    elif using_nets:
        result["net"] = _most_common(using_nets)
    else:
        for kind in NET_KINDS:
            if kind in listed:
                result["net"] = kind
                break
    result["ib_devices"] = sorted(ib_devices, key=_natural_key)
    if net_channel_seen:
        result["gdrdma"] = gdr_seen
    result["intra"] = sorted(intra)
    return result


def _has_output(parsed):
    if not parsed:
        return False
    if "info_lines" in parsed:
        return bool(parsed.get("info_lines"))
    return any(parsed.get(key) for key in ("version", "net", "ib_devices", "intra", "nranks"))


def _count(value, what):
    try:
        count = int(value or 0)
    except (TypeError, ValueError):
        raise ValueError("%s must be a number, got %r" % (what, value))
    if count < 0:
        raise ValueError("%s must not be negative, got %d" % (what, count))
    return count


def transport_problems(parsed, active_rdma_ports=0, multi_node=False):
    """One sentence per transport problem in a ``parse_nccl_debug`` result (empty list when none).

    ``active_rdma_ports`` is the number of RDMA ports in state ACTIVE on the node (rdma_facts); with any
    of them up, a socket transport means NCCL could not use the fabric. ``multi_node`` says the run spanned
    nodes, so NCCL must have reported a network transport.
    """
    ports = _count(active_rdma_ports, "active_rdma_ports")
    if not _has_output(parsed):
        return ["NCCL_DEBUG=INFO output missing: the job printed no 'NCCL INFO' line, so the transport NCCL "
                "chose cannot be checked (run it with NCCL_DEBUG=INFO)."]
    problems = []
    net = parsed.get("net")
    if net == "Socket" and ports:
        problems.append(
            "NCCL used TCP sockets although %d RDMA port%s %s active: check that the job sees the HCAs "
            "(/dev/infiniband in the container, libibverbs, NCCL_IB_HCA) and that NCCL_IB_DISABLE is not set."
            % (ports, "" if ports == 1 else "s", "is" if ports == 1 else "are"))
    elif multi_node and net is None:
        problems.append(
            "No NCCL network transport was reported in a multi-node run: there is no 'via NET/' channel line "
            "and no 'Using network' line, so the traffic between nodes cannot be confirmed (keep "
            "NCCL_DEBUG_SUBSYS at its default or include INIT,NET).")
    return problems


def transport_summary(parsed):
    """A short line such as ``NCCL 2.18.1, net IB (mlx5_0:1, mlx5_1:1), GPUDirect RDMA on, intra-node
    P2P+SHM, 16 ranks``."""
    if not _has_output(parsed):
        return "no NCCL_DEBUG=INFO output"
    version = parsed.get("version")
    parts = ["NCCL %s" % version if version else "NCCL (version not printed)"]
    net = parsed.get("net")
    if net:
        devices = parsed.get("ib_devices") or []
        if net == "IB" and devices:
            parts.append("net IB (%s)" % ", ".join(devices))
        else:
            parts.append("net %s" % net)
    else:
        parts.append("no network transport seen")
    gdrdma = parsed.get("gdrdma")
    if gdrdma is not None:
        parts.append("GPUDirect RDMA %s" % ("on" if gdrdma else "off"))
    intra = parsed.get("intra") or []
    if intra:
        parts.append("intra-node %s" % "+".join(intra))
    nranks = parsed.get("nranks")
    if nranks:
        parts.append("%d rank%s" % (nranks, "" if nranks == 1 else "s"))
    warnings = parsed.get("warnings") or 0
    if warnings:
        parts.append("%d NCCL WARN line%s" % (warnings, "" if warnings == 1 else "s"))
    return ", ".join(parts)
