#!/usr/bin/env python3
"""gpufleet DDP/NCCL check, run with torchrun inside the training image.

    torchrun --nproc_per_node=8 gpufleet_ddp_check.py --size-mb 256 --expect-world-size 8
    torchrun --nnodes=2 --node_rank=N --rdzv_endpoint=host:29500 ... gpufleet_ddp_check.py --expect-nnodes 2

What it proves, on every rank:
  * torch sees CUDA and the expected number of devices (--expect-gpus),
  * the job is as large and as wide as meant (--expect-world-size, --expect-nnodes: a multi-node run that
    quietly ran on one node fails),
  * the process group initialises with the requested backend (nccl on GPUs),
  * a DistributedDataParallel training step runs and leaves identical weights on every rank,
  * an all_reduce of a large tensor returns the exact sum in every element; every node's local rank 0 prints the algorithm and
    bus bandwidth (nccl-tests' definition: busbw = algbw * 2 (n - 1) / n for all_reduce). One rank moves
    nothing over a bus: busbw is then null, `busbw_note` says so and --min-busbw-gbps is not applied.
Local rank 0 of every node prints one JSON line prefixed `GPUFLEET_DDP_RESULT ` and the exit status says pass (0) or fail (1).
The line also says which fabric settings the check saw where it ran ("fabric": the NCCL_* and UCX_* variables
as the process started, and whether /etc/nccl.conf and /etc/ucx/ucx.conf were there), for validate to compare
with the node's own.
Needs nothing from the network: no hub downloads, no datasets.
"""
import argparse
import json
import os
import socket
import sys
import time

RESULT_PREFIX = "GPUFLEET_DDP_RESULT "
ONE_RANK_NOTE = "one rank measures no bus bandwidth; --min-busbw-gbps was not applied"
MAX_RANKS_LISTED = 256  # above this the report counts ranks per host instead of listing every rank
FABRIC_PREFIXES = ("NCCL_", "UCX_")
SETTINGS_FILES = {"nccl_conf": "/etc/nccl.conf", "ucx_conf": "/etc/ucx/ucx.conf"}


def fabric_settings(environ, exists=os.path.exists):
    """The fabric settings this process sees: its NCCL_*/UCX_* variables and which settings files exist.

    Read before torch starts: NCCL copies /etc/nccl.conf into the C environment at its init, and that must not
    count as a variable the container was given.
    """
    seen = {"env": dict((key, environ[key]) for key in sorted(environ) if key.startswith(FABRIC_PREFIXES))}
    for name, path in sorted(SETTINGS_FILES.items()):
        seen[name] = bool(exists(path))
    return seen


def bus_bandwidth_gbps(size_bytes, seconds, world_size):
    """Return (algbw, busbw) in GB/s for one all_reduce of size_bytes that took seconds; busbw None for 1 rank."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    algbw = size_bytes / seconds / 1e9
    if world_size < 2:
        return algbw, None
    return algbw, algbw * 2.0 * (world_size - 1) / world_size


def expected_values(world_size):
    """Exact float32 results of one all_reduce (SUM) of the check tensor.

    Every rank fills the tensor with 1.0 and its last element with (rank % 7) + 1: the body must come back as
    world_size, the last element as the sum of (r % 7) + 1 over all ranks. Every partial sum on the way is an
    integer no larger than the result, exact in float32 while 4 * world_size < 2 ** 24 (over four million
    ranks), so the order in which NCCL or gloo adds does not matter.
    """
    weeks, rest = divmod(world_size, 7)
    return {"body": float(world_size), "last": float(weeks * 28 + rest * (rest + 1) // 2)}


def check_allreduce(sample_values, world_size):
    """Problems in what the all_reduce returned.

    sample_values: "first" and "last" (elements of the verified tensor), "body_mismatches" (elements other
    than the last that differ from the expected body value), "timed_nonzero" (elements of the all-zero timing
    tensor that are not zero after the timed rounds).
    """
    expected = expected_values(world_size)
    found = []
    if sample_values["first"] != expected["body"] or sample_values.get("body_mismatches", 0):
        found.append("all_reduce returned %r in element 0 and %d wrong elements, expected %r everywhere" % (
            sample_values["first"], sample_values.get("body_mismatches", 0), expected["body"]))
    if sample_values["last"] != expected["last"]:
        found.append("all_reduce returned %r in the last element, expected %r (sum of rank %% 7 + 1)" % (
            sample_values["last"], expected["last"]))
    if sample_values.get("timed_nonzero", 0):
        found.append("%d elements of the all-zero tensor were not zero after the timed all_reduce rounds" %
                     sample_values["timed_nonzero"])
    return found


def choose_backend(requested, cuda_available):
    if requested != "auto":
        return requested
    return "nccl" if cuda_available else "gloo"


def placement_problems(world_size, nnodes, expect_world_size=None, expect_nnodes=None):
    """Did the job run as large and as wide as it was meant to? nnodes None: not known yet."""
    found = []
    if expect_world_size is not None and world_size != expect_world_size:
        found.append("WORLD_SIZE is %d, expected %d" % (world_size, expect_world_size))
    if expect_nnodes is not None and nnodes is not None and nnodes < expect_nnodes:
        found.append("ranks ran on %d distinct host(s), expected %d" % (nnodes, expect_nnodes))
    return found


def problems_before_init(backend, cuda_available, device_count, expect_gpus, local_world_size,
                         world_size=None, expect_world_size=None):
    """Checks that need no process group; each problem is one sentence."""
    found = []
    if backend == "nccl" and not cuda_available:
        found.append("backend nccl needs CUDA but torch.cuda.is_available() is False")
    if expect_gpus is not None and device_count != expect_gpus:
        found.append("torch.cuda.device_count() is %d, expected %d" % (device_count, expect_gpus))
    if backend == "nccl" and cuda_available and local_world_size > device_count:
        found.append("%d local ranks but only %d CUDA devices" % (local_world_size, device_count))
    if world_size is not None:
        found += placement_problems(world_size, None, expect_world_size)
    return found


def verdict(backend, world_size, local_world_size, rank_hosts, device, torch_version, nccl_version,
            size_bytes, iters, seconds_per_iter, samples, ddp_consistent=True, min_busbw_gbps=0.0,
            expect_world_size=None, expect_nnodes=None, wrong_ranks=()):
    """The report every node's local rank 0 prints, from measured numbers and thresholds.

    rank_hosts: hostname of rank i; samples: rank 0's all_reduce result (see check_allreduce); wrong_ranks:
    the ranks whose own all_reduce result was wrong.
    """
    hosts = sorted(set(rank_hosts))
    algbw, busbw = bus_bandwidth_gbps(size_bytes, seconds_per_iter, world_size)
    problems = placement_problems(world_size, len(hosts), expect_world_size, expect_nnodes)
    if len(rank_hosts) != world_size:
        problems.append("%d ranks reported a hostname, expected %d" % (len(rank_hosts), world_size))
    if not ddp_consistent:
        problems.append("DDP step left different weights on different ranks")
    problems += check_allreduce(samples, world_size)
    if wrong_ranks:
        shown = ", ".join(str(r) for r in list(wrong_ranks)[:16])
        more = " and %d more" % (len(wrong_ranks) - 16) if len(wrong_ranks) > 16 else ""
        problems.append("all_reduce returned wrong values on rank(s) %s%s of %d" % (shown, more, world_size))
    if busbw is not None and busbw < min_busbw_gbps:
        problems.append("bus bandwidth %.2f GB/s is below the required %.2f GB/s" % (busbw, min_busbw_gbps))
    per_host = {}
    for host in rank_hosts:
        per_host[host] = per_host.get(host, 0) + 1
    return {
        "passed": not problems, "problems": problems, "backend": backend, "device": device,
        "world_size": world_size, "local_world_size": local_world_size, "nnodes": len(hosts), "hosts": hosts,
        "ranks": ([{"rank": i, "host": h} for i, h in enumerate(rank_hosts)]
                  if world_size <= MAX_RANKS_LISTED else None),
        "ranks_per_host": per_host, "torch": torch_version, "nccl": nccl_version,
        "size_bytes": size_bytes, "iters": iters, "seconds_per_iter": round(seconds_per_iter, 6),
        "algbw_gbps": round(algbw, 3), "busbw_gbps": None if busbw is None else round(busbw, 3),
        "busbw_note": ONE_RANK_NOTE if busbw is None else None, "min_busbw_gbps": min_busbw_gbps,
        "expected": expected_values(world_size),
    }


def gather_text(dist, torch, device, world_size, text, width=128):
    """Every rank's ``text``, via a fixed-width byte tensor (works on every backend, needs no numpy)."""
    raw = text.encode("utf-8")[:width].ljust(width, b"\0")
    mine = torch.tensor(list(raw), dtype=torch.uint8, device=device)
    gathered = [torch.zeros_like(mine) for _round in range(world_size)]
    dist.all_gather(gathered, mine)
    return [bytes(t.cpu().tolist()).rstrip(b"\0").decode("utf-8", "replace") for t in gathered]


def gather_hostnames(dist, torch, device, world_size, width=128):
    """Every rank's hostname."""
    return gather_text(dist, torch, device, world_size, socket.gethostname(), width)


def format_cpulist(cpus):
    """A set of CPU numbers as the kernel writes it (0-3,8-11)."""
    ranges = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def placement_record(environ, affinity, gpu_uuid=None):
    """Where this rank runs: its local rank (torchrun's, else Open MPI's, else Slurm's; None when it is not a
    number), the GPU it uses (UUID, None on CPU), the CPUs it may run on, and the plan the rank binder
    (gpufleet-bind) gave it: GPUFLEET_BIND_SLOT, _CPUS and _NUMA, or _SKIP with its reason (all None when no binder
    ran). The MPI check (gpufleet_mpi_check.py, beside this file) reports the same record."""
    local = environ.get("LOCAL_RANK", environ.get("OMPI_COMM_WORLD_LOCAL_RANK", environ.get("SLURM_LOCALID", "0")))
    return {"local_rank": int(local) if local.isdigit() else None, "gpu_uuid": gpu_uuid,
            "cpus": format_cpulist(affinity), "plan_slot": environ.get("GPUFLEET_BIND_SLOT"),
            "plan_cpus": environ.get("GPUFLEET_BIND_CPUS"), "plan_numa": environ.get("GPUFLEET_BIND_NUMA"),
            "plan_skip": environ.get("GPUFLEET_BIND_SKIP")}


def read_record(text):
    """A gathered placement_record, or {"unreadable": its start} where it was cut or garbled."""
    try:
        record = json.loads(text)
    except ValueError:
        return {"unreadable": text[:80]}
    return record if isinstance(record, dict) else {"unreadable": text[:80]}


def gpu_uuid(torch, index):
    """nvidia-smi's form of a CUDA device's UUID (GPU-xxxxxxxx-...), or None where torch does not give it."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return None if uuid is None else "GPU-%s" % uuid


def nccl_version_string(torch):
    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=256.0, help="all_reduce tensor size in MiB")
    parser.add_argument("--iters", type=int, default=20, help="timed all_reduce rounds (at least 1)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    parser.add_argument("--expect-gpus", type=int, default=None, help="CUDA devices every node must see")
    parser.add_argument("--expect-world-size", type=int, default=None, help="fail unless WORLD_SIZE is N")
    parser.add_argument("--expect-nnodes", type=int, default=None, help="fail when fewer than N hosts took part")
    parser.add_argument("--min-busbw-gbps", type=float, default=0.0, help="fail below this bus bandwidth")
    args = parser.parse_args(argv)
    if args.iters < 1:
        parser.error("--iters must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    fabric = fabric_settings(dict(os.environ))
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    cuda = torch.cuda.is_available()
    device_count = torch.cuda.device_count() if cuda else 0
    backend = choose_backend(args.backend, cuda)

    problems = problems_before_init(backend, cuda, device_count, args.expect_gpus, local_world_size,
                                    world_size, args.expect_world_size)
    if problems:
        report = {"passed": False, "rank": rank, "host": socket.gethostname(), "problems": problems,
                  "cuda_available": cuda, "device_count": device_count, "backend": backend,
                  "world_size": world_size, "local_world_size": local_world_size, "torch": torch.__version__,
                  "fabric": fabric}
        # Every rank says it: the first rank to exit makes torchrun stop its siblings, so a line printed by
        # local rank 0 alone could be lost. The lines are the same but for "rank"; readers take the last.
        print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
        return 1

    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    # One DDP training step: gradients are averaged across ranks, so weights must end identical.
    torch.manual_seed(1234 + rank)  # different data per rank
    model = torch.nn.Linear(64, 64).to(device)
    with torch.no_grad():
        torch.manual_seed(0)
        for param in model.parameters():
            param.copy_(torch.randn_like(param))
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if backend == "nccl" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(1234 + rank)
    loss = ddp(torch.randn(32, 64, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    gathered = [torch.zeros_like(checksum) for _round in range(world_size)]
    dist.all_gather(gathered, checksum)
    ddp_consistent = all(abs(float(g) - float(gathered[0])) < 1e-6 for g in gathered)

    # all_reduce bandwidth, then correctness. The timed rounds run back to back on an all-zero tensor: its sum
    # stays zero however many rounds run (no overflow, no refill inside the timer, and neither NCCL nor gloo
    # works differently on zeros), and it must still be all zeros afterwards. Correctness is then proven by
    # one untimed round on a freshly filled tensor whose every element is checked against expected_values().
    numel = max(2, int(args.size_mb * 1024 * 1024 / 4))
    tensor = torch.zeros(numel, dtype=torch.float32, device=device)
    for _round in range(args.warmup):
        dist.all_reduce(tensor)
    synchronize()
    dist.barrier()
    synchronize()
    started = time.perf_counter()
    for _round in range(args.iters):
        dist.all_reduce(tensor)
    synchronize()
    # The slowest rank's time: every rank then reaches the same verdict on the bandwidth floor.
    seconds = torch.tensor([(time.perf_counter() - started) / args.iters], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    seconds_per_iter = float(seconds)
    timed_nonzero = int(torch.count_nonzero(tensor))

    tensor.fill_(1.0)
    tensor[-1] = float(rank % 7 + 1)
    dist.all_reduce(tensor)
    synchronize()
    expected = expected_values(world_size)
    samples = {"first": float(tensor[0]), "last": float(tensor[-1]), "timed_nonzero": timed_nonzero,
               "body_mismatches": int(torch.count_nonzero(tensor[:-1] != expected["body"]))}

    mine = torch.tensor([len(check_allreduce(samples, world_size))], dtype=torch.int64, device=device)
    flags = [torch.zeros_like(mine) for _round in range(world_size)]
    dist.all_gather(flags, mine)
    wrong_ranks = [r for r, flag in enumerate(flags) if int(flag)]
    hosts = gather_hostnames(dist, torch, device, world_size)
    # Where each rank ran, read before any teardown: the placement step compares it with the node's placement map.
    mine = placement_record(os.environ, os.sched_getaffinity(0),
                            gpu_uuid(torch, local_rank) if backend == "nccl" else None)
    placement = [dict(read_record(text), rank=index, host=hosts[index])
                 for index, text in enumerate(gather_text(dist, torch, device, world_size, json.dumps(mine), 1024))]
    # Tear down in step: DDP's reducer first, then a barrier so that no rank closes its connections while a
    # peer is still finishing a collective (gloo aborts the late rank with "terminate called" otherwise).
    del optimizer, ddp
    dist.barrier()
    dist.destroy_process_group()

    report = verdict(
        backend, world_size, local_world_size, hosts, device.type, torch.__version__,
        nccl_version_string(torch) if backend == "nccl" else None, numel * 4, args.iters, seconds_per_iter,
        samples, ddp_consistent, args.min_busbw_gbps, args.expect_world_size, args.expect_nnodes, wrong_ranks)
    report.update(cuda_available=cuda, cuda_version=getattr(torch.version, "cuda", None), device_count=device_count,
                  rank=rank, fabric=fabric,
                  placement=placement if world_size <= MAX_RANKS_LISTED else None)
    # Every rank holds the whole verdict (the measurements were reduced, the flags gathered); each node's local
    # rank 0 prints it, so every node's own torchrun output carries the result.
    if local_rank == 0:
        print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    EXIT_CODE = main()
    # The verdict is printed and the process group destroyed; leave without the interpreter's teardown. With
    # torch 2.13's gloo, a rank sometimes aborted there ("terminate called without an active exception", SIGABRT,
    # about 1 run in 12 of three CPU ranks), turning a passed check into a failed torchrun.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_CODE)
