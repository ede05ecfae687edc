"""gpufleet-bind (roles/image_security/files/gpufleet_bind.py): the plan that binds each local rank next to its GPU,
and the run.

The maps are what placement_facts makes of the recorded trees (tests/fixtures/sysfs, see test_placement.py).
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "roles", "image_security", "files", "gpufleet_bind.py")


@pytest.fixture(scope="module")
def bind():
    loader = importlib.machinery.SourceFileLoader("gpufleet_bind", SCRIPT)
    spec = importlib.util.spec_from_loader("gpufleet_bind", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def gpu(index, node, cpus, uuid=None):
    return {"index": index, "uuid": uuid or "GPU-%d" % index, "numa_node": node, "cpus": cpus,
            "nearest_hcas": [], "nvlink_peers": []}


# Two sockets, four GPUs per socket (an 8-GPU HGX-like node): 0-47 and 48-95.
EIGHT = {"version": 1, "numa_nodes": [{"node": 0, "cpus": "0-47"}, {"node": 1, "cpus": "48-95"}], "cpus": "0-95",
         "gpus": [gpu(i, 0 if i < 4 else 1, "0-47" if i < 4 else "48-95") for i in range(8)], "hcas": []}
CPU_ONLY = {"version": 1, "numa_nodes": [{"node": 0, "cpus": "0-1"}], "cpus": "0-1", "gpus": [],
            "gpu_reason": "no NVIDIA GPU on the PCI bus", "hcas": []}
ALL = set(range(96))


def torchrun(rank, size, **extra):
    return dict({"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(size)}, **extra)


def test_eight_ranks_on_eight_gpus_get_disjoint_slices_of_their_gpus_socket(bind):
    plans = [bind.plan(EIGHT, torchrun(rank, 8), ALL) for rank in range(8)]
    assert [p["slot"] for p in plans] == ["GPU %d" % i for i in range(8)]
    assert [p["numa_node"] for p in plans] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [bind.format_cpulist(p["cpus"]) for p in plans] == [
        "0-11", "12-23", "24-35", "36-47", "48-59", "60-71", "72-83", "84-95"]


def test_open_mpi_and_slurm_ranks_are_read_too(bind):
    mpi = bind.plan(EIGHT, {"OMPI_COMM_WORLD_LOCAL_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, ALL)
    slurm = bind.plan(EIGHT, {"SLURM_LOCALID": "5", "SLURM_NTASKS_PER_NODE": "8"}, ALL)
    assert mpi["slot"] == slurm["slot"] == "GPU 5" and mpi["from"] == "OMPI_COMM_WORLD_LOCAL_RANK"
    assert bind.format_cpulist(mpi["cpus"]) == "60-71"


def test_cuda_visible_devices_picks_and_orders_the_gpus_by_index_or_uuid(bind):
    env = torchrun(0, 2, CUDA_VISIBLE_DEVICES="GPU-6,2")
    assert bind.plan(EIGHT, env, ALL)["slot"] == "GPU 6"
    second = bind.plan(EIGHT, torchrun(1, 2, CUDA_VISIBLE_DEVICES="GPU-6,2"), ALL)
    assert second["slot"] == "GPU 2" and bind.format_cpulist(second["cpus"]) == "0-47"
    # CUDA stops at the first entry it cannot use.
    assert [g["index"] for g in bind.visible_gpus(EIGHT, {"CUDA_VISIBLE_DEVICES": "3,9,4"})] == [3]


def test_the_cpus_the_container_may_use_bound_the_plan(bind):
    allowed = set(range(0, 24)) | set(range(48, 72))
    plans = [bind.plan(EIGHT, torchrun(rank, 8), allowed) for rank in range(8)]
    assert [bind.format_cpulist(p["cpus"]) for p in plans] == [
        "0-5", "6-11", "12-17", "18-23", "48-53", "54-59", "60-65", "66-71"]


def test_more_ranks_than_cpus_share_them_one_each_round_robin(bind):
    plans = [bind.plan(CPU_ONLY, torchrun(rank, 3), {0, 1}) for rank in range(3)]
    assert [p["cpus"] for p in plans] == [[0], [1], [0]]


def test_a_cpu_only_map_spreads_ranks_over_the_numa_nodes(bind):
    two = {"numa_nodes": [{"node": 0, "cpus": "0-3"}, {"node": 1, "cpus": "4-7"}], "gpus": []}
    plans = [bind.plan(two, torchrun(rank, 4), set(range(8))) for rank in range(4)]
    assert [(p["slot"], p["cpus"]) for p in plans] == [
        ("NUMA node 0", [0, 1]), ("NUMA node 1", [4, 5]), ("NUMA node 0", [2, 3]), ("NUMA node 1", [6, 7])]


@pytest.mark.parametrize("placement, environ, allowed, why", [
    (EIGHT, {}, ALL, "no local rank"),
    (EIGHT, {"LOCAL_RANK": "8", "LOCAL_WORLD_SIZE": "8"}, ALL, "no local rank"),
    (EIGHT, {"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "8"}, ALL, "no local rank"),
    ({"gpus": [], "numa_nodes": []}, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, ALL, "names no GPU"),
    (EIGHT, {"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "8"}, set(range(48)), "none of GPU 4's CPUs"),
])
def test_nothing_is_bound_where_the_plan_cannot_say(bind, placement, environ, allowed, why):
    assert why in bind.plan(placement, environ, allowed)["skip"]


def _run(tmp_path, placement, env, *args):
    path = tmp_path / "placement.json"
    path.write_text(json.dumps(placement))
    environ = dict(os.environ, GPUFLEET_PLACEMENT=str(path), **env)
    return subprocess.run([sys.executable, SCRIPT] + list(args), env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=30, check=False)


def test_the_program_runs_bound_to_the_planned_cpus(tmp_path):
    """The exec'd program reads its own affinity: the plan's CPUs of this machine's first NUMA node slot."""
    cpus = sorted(os.sched_getaffinity(0))
    placement = {"numa_nodes": [{"node": 0, "cpus": ",".join(map(str, cpus))}], "gpus": []}
    size = min(2, len(cpus))
    for rank in range(size):
        run = _run(tmp_path, placement, {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(size),
                                         "GPUFLEET_BIND_VERBOSE": "1"},
                   "--", sys.executable, "-c",
                   "import json, os; print(json.dumps([sorted(os.sched_getaffinity(0)),"
                   " dict((k, v) for k, v in os.environ.items() if k.startswith(('GPUFLEET_BIND_', 'CUDA_')))]))")
        assert run.returncode == 0, run.stderr
        expected = cpus[rank * len(cpus) // size:(rank + 1) * len(cpus) // size]
        affinity, plan = json.loads(run.stdout)
        assert affinity == expected
        assert plan == {"GPUFLEET_BIND_SLOT": "NUMA node 0", "GPUFLEET_BIND_NUMA": "0", "GPUFLEET_BIND_VERBOSE": "1",
                        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                        "GPUFLEET_BIND_CPUS": ",".join(map(str, expected)) if len(expected) == 1 else
                        "%d-%d" % (expected[0], expected[-1])}
        assert "local rank %d of %d: NUMA node 0, CPUs" % (rank, size) in run.stderr


def test_without_a_map_the_program_runs_unbound_and_says_why(tmp_path):
    environ = dict(os.environ, GPUFLEET_PLACEMENT=str(tmp_path / "absent.json"), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    environ["GPUFLEET_BIND_CPUS"] = "0"  # a stale plan from an outer binder is not passed on
    run = subprocess.run([sys.executable, SCRIPT, "--", sys.executable, "-c",
                          "import os; print(len(os.sched_getaffinity(0)), os.environ.get('GPUFLEET_BIND_CPUS'),"
                          " os.environ['GPUFLEET_BIND_SKIP'])"],
                         env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                         check=False)
    assert run.returncode == 0
    count, stale, skip = run.stdout.split(" ", 2)
    assert int(count) == len(os.sched_getaffinity(0)) and stale == "None"
    assert skip.startswith("no placement map at")
    assert "nothing bound: no placement map at" in run.stderr


def test_print_shows_the_plan_and_runs_nothing(tmp_path):
    run = _run(tmp_path, CPU_ONLY, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, "--print")
    plan = json.loads(run.stdout)
    assert plan["slot"] == "NUMA node 0" and plan["cpus"] in ("0", "0-1")
    assert plan["memory"].startswith("NUMA node 0 preferred") or plan["memory"].startswith("not set:")
