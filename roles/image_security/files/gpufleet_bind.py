#!/usr/bin/python3 -I
# Installed by the gpufleet.cluster image_security role; every launched container has it read-only at
# /opt/gpufleet/bind/gpufleet-bind.
"""Bind one rank to its GPU's CPUs and memory, then run the training program in its place.

    gpufleet-bind [--print] [--] PROGRAM [ARG...]

Put it in front of the program each rank runs, under torchrun or mpirun:

    torchrun --no-python --nproc_per_node=8 ... /opt/gpufleet/bind/gpufleet-bind python3 train.py
    mpirun --bind-to none --map-by ppr:8:node ... /opt/gpufleet/bind/gpufleet-bind python3 train.py

The local rank and the number of ranks on this node come from torchrun (LOCAL_RANK, LOCAL_WORLD_SIZE), Open MPI
(OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE) or Slurm (SLURM_LOCALID, SLURM_NTASKS_PER_NODE). The node's
placement map (/etc/gpufleet/placement.json, or GPUFLEET_PLACEMENT) says where each GPU sits. The plan:

  * Local rank r uses the r-th GPU the job sees (CUDA_VISIBLE_DEVICES, by index or UUID, else every GPU of the map),
    round robin when there are more ranks than GPUs; without a GPU (a CPU-only map) the NUMA nodes take its place,
    round robin. The program gets CUDA_DEVICE_ORDER=PCI_BUS_ID unless it is set, so that CUDA numbers the GPUs as
    nvidia-smi and the map do (CUDA's own default may put a faster GPU first).
  * Its CPUs are that GPU's local CPUs (its NUMA node's where the map has no list), within the CPUs this process
    may use, shared out without overlap among the local ranks that got the same CPU set: rank k of n on that set
    gets the k-th of n near-equal contiguous slices.
  * Its memory comes from that NUMA node first (set_mempolicy MPOL_PREFERRED), where the map names one.

Nothing is bound when the map is missing, names no CPU this process may use, or the rank is unknown: the program
then runs as it would have, and a note on stderr says why. --print prints the plan as JSON and runs nothing.

The program finds the plan in its environment, for a check of its own: GPUFLEET_BIND_SLOT ("GPU 3", "NUMA node 1"),
GPUFLEET_BIND_CPUS (a kernel CPU list), GPUFLEET_BIND_NUMA (empty where the map names no node), or
GPUFLEET_BIND_SKIP with the reason nothing was bound.
"""

import ctypes
import json
import os
import platform
import sys

PLACEMENT = "/etc/gpufleet/placement.json"
RANK_VARIABLES = (("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                  ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                  ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"))
# set_mempolicy(2): the syscall number per architecture, and MPOL_PREFERRED.
SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261}
MPOL_PREFERRED = 1


def note(message):
    sys.stderr.write("gpufleet-bind: %s\n" % message)


def parse_cpulist(text):
    cpus = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError("not a CPU list: %r" % text)
        cpus.update(range(int(first), int(last if sep else first) + 1))
    return sorted(cpus)


def format_cpulist(cpus):
    ranges = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def local_rank(environ):
    """(local rank, local ranks on this node, where they came from), or None when no launcher set them."""
    for rank_name, size_name in RANK_VARIABLES:
        rank, size = environ.get(rank_name, ""), environ.get(size_name, "")
        if rank.isdigit() and size.isdigit() and int(rank) < int(size):
            return int(rank), int(size), rank_name
    return None


def visible_gpus(placement, environ):
    """The map's GPUs this job sees, in the order CUDA numbers them (CUDA_VISIBLE_DEVICES by index or UUID)."""
    gpus = placement.get("gpus") or []
    wanted = environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return sorted(gpus, key=lambda gpu: gpu["index"])
    by_key = {}
    for gpu in gpus:
        by_key[str(gpu["index"])] = gpu
        if gpu.get("uuid"):
            by_key[gpu["uuid"]] = gpu
    seen = []
    for item in wanted.split(","):
        gpu = by_key.get(item.strip())
        if gpu is None:
            break  # CUDA stops at the first entry it cannot use
        seen.append(gpu)
    return seen


def _slots(placement, environ):
    """Per local slot (one per GPU the job sees, else one per NUMA node): (label, NUMA node or None, CPUs)."""
    nodes = dict((entry["node"], parse_cpulist(entry["cpus"])) for entry in placement.get("numa_nodes") or [])
    gpus = visible_gpus(placement, environ)
    if gpus:
        return [("GPU %d" % gpu["index"], gpu.get("numa_node"),
                 parse_cpulist(gpu.get("cpus") or "") or nodes.get(gpu.get("numa_node")) or [])
                for gpu in gpus]
    return [("NUMA node %d" % node, node, cpus) for node, cpus in sorted(nodes.items())]


def plan(placement, environ, allowed):
    """What local rank environ names gets: {rank, ranks, slot, numa_node, cpus} (cpus a sorted list), or
    {'skip': why}."""
    rank = local_rank(environ)
    if rank is None:
        return {"skip": "no local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID with its size)"}
    rank, ranks, source = rank
    slots = _slots(placement, environ)
    if not slots:
        return {"skip": "the placement map names no GPU this job sees and no NUMA node"}
    allowed = set(allowed)
    label, node, cpus = slots[rank % len(slots)]
    cpus = [cpu for cpu in cpus if cpu in allowed]
    if not cpus:
        return {"skip": "none of %s's CPUs is one this process may use" % label}
    # The local ranks that got the same CPU set share it out without overlap.
    sharing = [r for r in range(ranks) if [c for c in slots[r % len(slots)][2] if c in allowed] == cpus]
    share, count = sharing.index(rank), len(sharing)
    if count > len(cpus):
        mine = [cpus[share % len(cpus)]]
    else:
        start, end = share * len(cpus) // count, (share + 1) * len(cpus) // count
        mine = cpus[start:end]
    return {"rank": rank, "ranks": ranks, "from": source, "slot": label, "numa_node": node, "cpus": mine}


def prefer_node(node):
    """Ask the kernel to take this process's memory from NUMA node ``node`` first; the error text or None."""
    number = SET_MEMPOLICY.get(platform.machine())
    if number is None:
        return "set_mempolicy is not known on %s" % platform.machine()
    mask = ctypes.c_ulong(1 << node) if node < 64 else None
    if mask is None:
        return "NUMA node %d is beyond the mask this binder passes" % node
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, MPOL_PREFERRED, ctypes.byref(mask), ctypes.c_ulong(64)) != 0:
        return os.strerror(ctypes.get_errno())
    return None


def main(argv, environ):
    args = list(argv)
    show = bool(args) and args[0] == "--print"
    if show:
        args = args[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args and not show:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    path = environ.get("GPUFLEET_PLACEMENT") or PLACEMENT
    try:
        with open(path) as handle:
            placement = json.load(handle)
    except (OSError, ValueError) as exc:
        result = {"skip": "no placement map at %s (%s)" % (path, exc)}
    else:
        result = plan(placement, environ, os.sched_getaffinity(0))
    if "skip" not in result:
        os.sched_setaffinity(0, result["cpus"])
        result["memory"] = "not set (no NUMA node in the map)"
        if result["numa_node"] is not None:
            problem = prefer_node(result["numa_node"])
            result["memory"] = ("NUMA node %d preferred" % result["numa_node"]) if problem is None else (
                "not set: %s" % problem)
        result["cpus"] = format_cpulist(result["cpus"])
    if show:
        print(json.dumps(result, sort_keys=True))
        return 0
    child = dict((key, value) for key, value in environ.items() if not key.startswith("GPUFLEET_BIND_")
                 or key == "GPUFLEET_BIND_VERBOSE")
    if "skip" in result:
        note("nothing bound: %s" % result["skip"])
        child["GPUFLEET_BIND_SKIP"] = result["skip"]
    else:
        if environ.get("GPUFLEET_BIND_VERBOSE"):
            note("local rank %d of %d: %s, CPUs %s, memory %s"
                 % (result["rank"], result["ranks"], result["slot"], result["cpus"], result["memory"]))
        child.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        child.update(GPUFLEET_BIND_SLOT=result["slot"], GPUFLEET_BIND_CPUS=result["cpus"],
                     GPUFLEET_BIND_NUMA="" if result["numa_node"] is None else str(result["numa_node"]))
    os.execvpe(args[0], args, child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
