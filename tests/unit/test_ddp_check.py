"""The DDP/NCCL check script that validate runs inside the training image."""
import importlib.util
import json
import os
import shutil
import socket
import struct
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "roles", "validate", "files", "gpufleet_ddp_check.py")
spec = importlib.util.spec_from_file_location("gpufleet_ddp_check", SCRIPT)
ddp_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ddp_check)


def test_bus_bandwidth_matches_nccl_tests_definition():
    # 1 GB in 0.1 s on 8 ranks: algbw 10 GB/s, busbw 10 * 2 * 7 / 8 = 17.5 GB/s
    algbw, busbw = ddp_check.bus_bandwidth_gbps(1e9, 0.1, 8)
    assert algbw == pytest.approx(10.0)
    assert busbw == pytest.approx(17.5)
    # One rank moves nothing over a bus: no busbw at all rather than algbw passed off as one.
    assert ddp_check.bus_bandwidth_gbps(1e9, 0.5, 1) == (pytest.approx(2.0), None)


def test_bus_bandwidth_rejects_zero_time():
    with pytest.raises(ValueError):
        ddp_check.bus_bandwidth_gbps(1, 0, 2)


@pytest.mark.parametrize("requested,cuda,expected", [
    ("auto", True, "nccl"), ("auto", False, "gloo"), ("nccl", False, "nccl"), ("gloo", True, "gloo")])
def test_backend_choice(requested, cuda, expected):
    assert ddp_check.choose_backend(requested, cuda) == expected


def test_problems_before_init_name_what_is_wrong():
    assert ddp_check.problems_before_init("nccl", False, 0, None, 1) == [
        "backend nccl needs CUDA but torch.cuda.is_available() is False"]
    assert ddp_check.problems_before_init("nccl", True, 4, 8, 8) == [
        "torch.cuda.device_count() is 4, expected 8", "8 local ranks but only 4 CUDA devices"]
    assert ddp_check.problems_before_init("nccl", True, 8, 8, 8) == []
    assert ddp_check.problems_before_init("gloo", False, 0, None, 8, 8, 16) == ["WORLD_SIZE is 8, expected 16"]
    assert ddp_check.problems_before_init("gloo", False, 0, None, 8, 16, 16) == []


def _float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


@pytest.mark.parametrize("world_size", [1, 2, 3, 7, 8, 85, 1000, 1024, 65536])
def test_expected_values_are_exact_sums_in_float32(world_size):
    expected = ddp_check.expected_values(world_size)
    assert expected["body"] == float(world_size)
    assert expected["last"] == float(sum(r % 7 + 1 for r in range(world_size)))
    # Added up in float32 one rank at a time (the worst order), the sums come out exact.
    body = last = 0.0
    for r in range(world_size):
        body, last = _float32(body + 1.0), _float32(last + (r % 7 + 1))
    assert (body, last) == (expected["body"], expected["last"])


def _samples(world_size, **changes):
    expected = ddp_check.expected_values(world_size)
    samples = {"first": expected["body"], "last": expected["last"], "body_mismatches": 0, "timed_nonzero": 0}
    samples.update(changes)
    return samples


def _verdict(world_size, iters, ranks_per_host=8, samples=None, **kwargs):
    hosts = ["gpu%04d" % (r // ranks_per_host) for r in range(world_size)]
    arguments = dict(backend="nccl", world_size=world_size, local_world_size=min(world_size, ranks_per_host),
                     rank_hosts=hosts, device="cuda", torch_version="2.11.0", nccl_version="2.28.9",
                     size_bytes=256 * 1024 * 1024, iters=iters, seconds_per_iter=0.01,
                     samples=samples or _samples(world_size))
    arguments.update(kwargs)
    return ddp_check.verdict(**arguments)


@pytest.mark.parametrize("world_size,iters", [(1024, 50), (85, 20), (3, 7), (11 * 8, 20), (65536, 50)])
def test_healthy_fleets_of_any_size_pass(world_size, iters):
    report = _verdict(world_size, iters)
    assert report["passed"] is True, report["problems"]
    assert report["world_size"] == world_size and report["iters"] == iters
    assert report["nnodes"] == -(-world_size // 8) == len(report["hosts"])
    assert sum(report["ranks_per_host"].values()) == world_size
    algbw = 256 * 1024 * 1024 / 0.01 / 1e9
    assert report["algbw_gbps"] == pytest.approx(algbw, abs=1e-3)
    assert report["busbw_gbps"] == pytest.approx(algbw * 2 * (world_size - 1) / world_size, abs=1e-3)
    assert report["busbw_note"] is None


def test_per_rank_list_only_up_to_256_ranks():
    small = _verdict(3, 7, ranks_per_host=2)
    assert small["ranks"] == [{"rank": 0, "host": "gpu0000"}, {"rank": 1, "host": "gpu0000"},
                              {"rank": 2, "host": "gpu0001"}]
    assert small["hosts"] == ["gpu0000", "gpu0001"] and small["ranks_per_host"] == {"gpu0000": 2, "gpu0001": 1}
    assert _verdict(256, 1)["ranks"] is not None
    big = _verdict(1024, 50)
    assert big["ranks"] is None
    assert big["ranks_per_host"]["gpu0127"] == 8 and len(big["ranks_per_host"]) == 128


def test_one_rank_reports_no_bus_bandwidth_and_skips_the_floor():
    report = _verdict(1, 20, min_busbw_gbps=100.0)
    assert report["passed"] is True, report["problems"]
    assert report["busbw_gbps"] is None
    assert report["busbw_note"] == "one rank measures no bus bandwidth; --min-busbw-gbps was not applied"
    assert report["algbw_gbps"] > 0 and report["min_busbw_gbps"] == 100.0


def test_old_scheme_overflowed_where_this_one_stays_exact():
    # 85 ranks x 20 rounds without a refill: 85 ** 20 does not fit a float32 (it became inf on the GPU).
    assert _float32(85.0 ** 20) == float("inf")
    assert _verdict(85, 20)["passed"] is True


@pytest.mark.parametrize("changes,message", [
    ({"first": 1023.0}, "all_reduce returned 1023.0 in element 0 and 0 wrong elements, expected 1024.0 everywhere"),
    ({"body_mismatches": 5},
     "all_reduce returned 1024.0 in element 0 and 5 wrong elements, expected 1024.0 everywhere"),
    ({"last": 4090.0}, "all_reduce returned 4090.0 in the last element, expected 4091.0 (sum of rank % 7 + 1)"),
    ({"timed_nonzero": 3}, "3 elements of the all-zero tensor were not zero after the timed all_reduce rounds"),
])
def test_wrong_sum_fails(changes, message):
    report = _verdict(1024, 50, samples=_samples(1024, **changes))
    assert report["passed"] is False
    assert report["problems"] == [message]


def test_wrong_result_on_another_rank_fails():
    report = _verdict(1024, 50, wrong_ranks=list(range(100, 120)))
    assert report["problems"] == [
        "all_reduce returned wrong values on rank(s) 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, "
        "112, 113, 114, 115 and 4 more of 1024"]


def test_placement_and_bandwidth_floors():
    assert _verdict(16, 20, expect_world_size=16, expect_nnodes=2)["passed"] is True
    assert _verdict(8, 20, expect_world_size=16)["problems"] == ["WORLD_SIZE is 8, expected 16"]
    # A two-node job that quietly ran on one node.
    assert _verdict(16, 20, ranks_per_host=16, expect_nnodes=2)["problems"] == [
        "ranks ran on 1 distinct host(s), expected 2"]
    assert _verdict(8, 20, min_busbw_gbps=1000.0)["problems"] == [
        "bus bandwidth 46.98 GB/s is below the required 1000.00 GB/s"]
    assert _verdict(8, 20, ddp_consistent=False)["problems"] == ["DDP step left different weights on different ranks"]


def _results(output):
    return [json.loads(l[len(ddp_check.RESULT_PREFIX):]) for l in output.splitlines()
            if l.startswith(ddp_check.RESULT_PREFIX)]


def _result(output):
    lines = [l for l in output.splitlines() if l.startswith(ddp_check.RESULT_PREFIX)]
    assert len(lines) == 1, output
    return json.loads(lines[0][len(ddp_check.RESULT_PREFIX):])


torch = pytest.importorskip("torch")


def test_fabric_settings_are_the_nccl_and_ucx_variables_and_the_settings_files():
    seen = ddp_check.fabric_settings({"NCCL_SOCKET_IFNAME": "ib0", "UCX_TLS": "rc,sm", "NCCLX": "no",
                                      "OMPI_MCA_btl": "self", "PATH": "/bin"},
                                     exists=lambda path: path == "/etc/nccl.conf")
    assert seen == {"env": {"NCCL_SOCKET_IFNAME": "ib0", "UCX_TLS": "rc,sm"}, "nccl_conf": True, "ucx_conf": False}


def _torchrun():
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if not exe:
        pytest.skip("torchrun not installed")
    return exe


def test_two_ranks_on_cpu_pass(tmp_path):
    """The whole script under torchrun with 2 CPU ranks (gloo): the same code path as NCCL minus CUDA."""
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=2", SCRIPT, "--backend", "gloo", "--size-mb", "4",
         "--iters", "3", "--warmup", "1", "--expect-world-size", "2", "--expect-nnodes", "1"],
        capture_output=True, check=False, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1", NCCL_SOCKET_IFNAME="lo", UCX_TLS="tcp"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _result(proc.stdout)
    assert result["passed"] is True, result["problems"]
    assert result["world_size"] == 2 and result["local_world_size"] == 2
    assert result["backend"] == "gloo" and result["device"] == "cpu" and result["nccl"] is None
    assert result["torch"] == torch.__version__
    assert result["nnodes"] == 1 and result["hosts"] == [socket.gethostname()]
    assert result["ranks"] == [{"rank": 0, "host": socket.gethostname()}, {"rank": 1, "host": socket.gethostname()}]
    assert result["size_bytes"] == 4 * 1024 * 1024 and result["iters"] == 3
    assert result["seconds_per_iter"] > 0 and result["algbw_gbps"] > 0
    assert result["busbw_gbps"] == pytest.approx(result["algbw_gbps"], abs=2e-3)  # 2 (n - 1) / n = 1 for n = 2
    assert result["min_busbw_gbps"] == 0.0
    # What the ranks saw of the fabric settings, as they started (validate compares it with the node's file).
    assert result["fabric"]["env"]["NCCL_SOCKET_IFNAME"] == "lo" and result["fabric"]["env"]["UCX_TLS"] == "tcp"
    assert result["fabric"]["nccl_conf"] == os.path.exists("/etc/nccl.conf")


BINDER = os.path.join(ROOT, "roles", "image_security", "files", "gpufleet_bind.py")


def test_two_ranks_through_the_binder_report_where_they_ran(tmp_path):
    """As validate runs it: torchrun --no-python gpufleet-bind python3 check. Each rank's record carries the CPUs it
    ran on and the binder's plan, and the two agree; without the binder the plan fields are empty."""
    cpus = sorted(os.sched_getaffinity(0))
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps({"numa_nodes": [{"node": 0, "cpus": ddp_check.format_cpulist(cpus)}],
                                     "gpus": []}))
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=2", "--no-python", sys.executable, BINDER, sys.executable,
         SCRIPT, "--backend", "gloo", "--size-mb", "1", "--iters", "2", "--warmup", "1"],
        capture_output=True, check=False, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1", GPUFLEET_PLACEMENT=str(placement)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = _result(proc.stdout)["placement"]
    assert [r["rank"] for r in records] == [0, 1] and [r["local_rank"] for r in records] == [0, 1]
    for record in records:
        assert record["host"] == socket.gethostname() and record["gpu_uuid"] is None
        assert record["plan_slot"] == "NUMA node 0" and record["plan_numa"] == "0" and record["plan_skip"] is None
        assert record["cpus"] == record["plan_cpus"]
    if len(cpus) >= 2:
        assert records[0]["cpus"] != records[1]["cpus"]


def test_placement_record_without_a_binder():
    record = ddp_check.placement_record({"LOCAL_RANK": "1"}, {0, 1, 2, 5})
    assert record == {"local_rank": 1, "gpu_uuid": None, "cpus": "0-2,5", "plan_slot": None, "plan_cpus": None,
                      "plan_numa": None, "plan_skip": None}
    assert ddp_check.read_record('{"cpus": "0-') == {"unreadable": '{"cpus": "0-'}


def test_three_ranks_on_cpu_pass(tmp_path):
    """A world size that is not a power of two, with more rounds than ranks."""
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=3", SCRIPT, "--backend", "gloo", "--size-mb", "1",
         "--iters", "7", "--warmup", "1"],
        capture_output=True, check=False, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _result(proc.stdout)
    assert result["passed"] is True, result["problems"]
    assert result["world_size"] == 3 and result["iters"] == 7 and len(result["ranks"]) == 3


def test_world_size_other_than_expected_fails(tmp_path):
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=2", SCRIPT, "--backend", "gloo", "--size-mb", "1",
         "--expect-world-size", "3"],
        capture_output=True, check=False, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode != 0
    results = _results(proc.stdout)  # each rank that got to print before torchrun stopped the others
    assert 1 <= len(results) <= 2, proc.stdout
    for result in results:
        assert result["passed"] is False
        assert result["problems"] == ["WORLD_SIZE is 2, expected 3"]


def test_nccl_without_cuda_fails_with_reason(tmp_path):
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=1", SCRIPT, "--backend", "nccl", "--size-mb", "1"],
        capture_output=True, check=False, text=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode != 0
    result = _result(proc.stdout)
    assert result["passed"] is False
    assert "torch.cuda.is_available() is False" in result["problems"][0]
    assert "env" in result["fabric"]  # a check that stopped early still says what it saw


def test_unreachable_bandwidth_floor_fails(tmp_path):
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=2", SCRIPT, "--backend", "gloo", "--size-mb", "1",
         "--iters", "2", "--warmup", "1", "--min-busbw-gbps", "100000"],
        capture_output=True, check=False, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 1
    result = _result(proc.stdout)
    assert result["passed"] is False
    assert "below the required" in result["problems"][0]
