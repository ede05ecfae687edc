"""The DDP/NCCL check script that validate runs inside the training image."""
import importlib.util
import json
import os
import shutil
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
    assert ddp_check.bus_bandwidth_gbps(1e9, 0.5, 1) == (pytest.approx(2.0), pytest.approx(2.0))


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


def _result(output):
    lines = [l for l in output.splitlines() if l.startswith(ddp_check.RESULT_PREFIX)]
    assert len(lines) == 1, output
    return json.loads(lines[0][len(ddp_check.RESULT_PREFIX):])


torch = pytest.importorskip("torch")


def _torchrun():
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if not exe:
        pytest.skip("torchrun not installed")
    return exe


def test_two_ranks_on_cpu_pass(tmp_path):
    """The whole script under torchrun with 2 CPU ranks (gloo): the same code path as NCCL minus CUDA."""
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=2", SCRIPT, "--backend", "gloo", "--size-mb", "4",
         "--iters", "3", "--warmup", "1"],
        capture_output=True, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _result(proc.stdout)
    assert result["passed"] is True
    assert result["world_size"] == 2
    assert result["backend"] == "gloo"
    assert result["size_bytes"] == 4 * 1024 * 1024
    assert result["busbw_gbps"] > 0


def test_nccl_without_cuda_fails_with_reason(tmp_path):
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=1", SCRIPT, "--backend", "nccl", "--size-mb", "1"],
        capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode != 0
    result = _result(proc.stdout)
    assert result["passed"] is False
    assert "torch.cuda.is_available() is False" in result["problems"][0]


def test_unreachable_bandwidth_floor_fails(tmp_path):
    proc = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=2", SCRIPT, "--backend", "gloo", "--size-mb", "1",
         "--iters", "2", "--warmup", "1", "--min-busbw-gbps", "100000"],
        capture_output=True, text=True, timeout=240, cwd=str(tmp_path),
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 1
    result = _result(proc.stdout)
    assert result["passed"] is False
    assert "below the required" in result["problems"][0]
