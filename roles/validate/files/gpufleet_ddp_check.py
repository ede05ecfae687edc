#!/usr/bin/env python3
"""gpufleet DDP/NCCL check, run with torchrun inside the training image.

    torchrun --nproc_per_node=8 gpufleet_ddp_check.py --size-mb 256
    torchrun --nnodes=2 --node_rank=N --rdzv_endpoint=host:29500 ... gpufleet_ddp_check.py

What it proves, on every rank:
  * torch sees CUDA and the expected number of devices (--expect-gpus),
  * the process group initialises with the requested backend (nccl on GPUs),
  * a DistributedDataParallel training step runs and leaves identical weights on every rank,
  * an all_reduce of a large tensor returns the exact sum; rank 0 prints the algorithm and bus bandwidth
    (nccl-tests' definition: busbw = algbw * 2 (n - 1) / n for all_reduce).
Rank 0 prints one JSON line prefixed `GPUFLEET_DDP_RESULT ` and the exit status says pass (0) or fail (1).
Needs nothing from the network: no hub downloads, no datasets.
"""
import argparse
import json
import os
import socket
import sys
import time

RESULT_PREFIX = "GPUFLEET_DDP_RESULT "


def bus_bandwidth_gbps(size_bytes, seconds, world_size):
    """Return (algbw, busbw) in GB/s for one all_reduce of size_bytes that took seconds."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    algbw = size_bytes / seconds / 1e9
    factor = 2.0 * (world_size - 1) / world_size if world_size > 1 else 1.0
    return algbw, algbw * factor


def choose_backend(requested, cuda_available):
    if requested != "auto":
        return requested
    return "nccl" if cuda_available else "gloo"


def problems_before_init(backend, cuda_available, device_count, expect_gpus, local_world_size):
    """Checks that need no process group; each problem is one sentence."""
    found = []
    if backend == "nccl" and not cuda_available:
        found.append("backend nccl needs CUDA but torch.cuda.is_available() is False")
    if expect_gpus is not None and device_count != expect_gpus:
        found.append("torch.cuda.device_count() is %d, expected %d" % (device_count, expect_gpus))
    if backend == "nccl" and cuda_available and local_world_size > device_count:
        found.append("%d local ranks but only %d CUDA devices" % (local_world_size, device_count))
    return found


def gather_hostnames(dist, torch, device, world_size, width=128):
    """Every rank's hostname, via a fixed-width byte tensor (works on every backend, needs no numpy)."""
    raw = socket.gethostname().encode("utf-8")[:width].ljust(width, b"\0")
    mine = torch.tensor(list(raw), dtype=torch.uint8, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(world_size)]
    dist.all_gather(gathered, mine)
    return [bytes(t.cpu().tolist()).rstrip(b"\0").decode("utf-8", "replace") for t in gathered]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=256.0, help="all_reduce tensor size in MiB")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    parser.add_argument("--expect-gpus", type=int, default=None, help="CUDA devices every node must see")
    parser.add_argument("--min-busbw-gbps", type=float, default=0.0, help="fail below this bus bandwidth")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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

    problems = problems_before_init(backend, cuda, device_count, args.expect_gpus, local_world_size)
    if problems:
        report = {"passed": False, "rank": rank, "host": socket.gethostname(), "problems": problems,
                  "cuda_available": cuda, "device_count": device_count, "backend": backend}
        print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
        return 1

    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend)

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
    gathered = [torch.zeros_like(checksum) for _ in range(world_size)]
    dist.all_gather(gathered, checksum)
    ddp_consistent = all(abs(float(g) - float(gathered[0])) < 1e-6 for g in gathered)

    # all_reduce bandwidth and correctness.
    numel = max(1, int(args.size_mb * 1024 * 1024 / 4))
    tensor = torch.ones(numel, dtype=torch.float32, device=device)
    for _ in range(args.warmup):
        dist.all_reduce(tensor)
        tensor.fill_(1.0)
    if backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(tensor)
    if backend == "nccl":
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - started) / max(1, args.iters)
    # Each all_reduce sums world_size ones; after iters rounds the value is world_size ** iters.
    expected = float(world_size) ** args.iters
    sample = float(tensor[0].item())
    correct = abs(sample - expected) <= expected * 1e-5
    algbw, busbw = bus_bandwidth_gbps(numel * 4, elapsed, world_size)

    hosts = gather_hostnames(dist, torch, device, world_size)
    # Tear down in step: DDP's reducer first, then a barrier so that no rank closes its connections while a
    # peer is still finishing a collective (gloo aborts the late rank with "terminate called" otherwise).
    del optimizer, ddp
    dist.barrier()
    dist.destroy_process_group()

    problems = []
    if not ddp_consistent:
        problems.append("DDP step left different weights on different ranks")
    if not correct:
        problems.append("all_reduce returned %r, expected %r" % (sample, expected))
    if busbw < args.min_busbw_gbps:
        problems.append("bus bandwidth %.2f GB/s is below the required %.2f GB/s" % (busbw, args.min_busbw_gbps))
    if rank == 0:
        report = {
            "passed": not problems, "problems": problems, "backend": backend, "world_size": world_size,
            "hosts": sorted(set(hosts)), "cuda_available": cuda, "device_count": device_count,
            "size_bytes": numel * 4, "iters": args.iters, "seconds_per_iter": round(elapsed, 6),
            "algbw_gbps": round(algbw, 3), "busbw_gbps": round(busbw, 3), "torch": torch.__version__,
            "nccl": ".".join(str(v) for v in torch.cuda.nccl.version()) if backend == "nccl" else None,
        }
        print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
