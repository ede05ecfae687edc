"""The MPI check script that validate runs with mpirun (roles/validate/files/gpufleet_mpi_check.py)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, fixture_parts

SCRIPT = os.path.join(ROOT, "roles", "validate", "files", "gpufleet_mpi_check.py")
# As when it runs as a script: the DDP check beside it is importable.
sys.path.insert(0, os.path.dirname(SCRIPT))
spec = importlib.util.spec_from_file_location("gpufleet_mpi_check", SCRIPT)
mpi_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mpi_check)

CAPTURE = "mpirun-np3-verbose-ompi-4.1.4-debian12.txt"
SYSTEM_PYTHON = "/usr/bin/python3"


def load(name):
    """(header lines, body) of a tests/fixtures/openmpi file; the header must say where it came from."""
    lines, body = fixture_parts("openmpi", name)
    assert lines[0].startswith("# source: captured on ") and "mpirun " in lines[0], "%s names no source" % name
    return lines, body


def rank_reports(world_size, hosts=("node1",), pml="ob1"):
    expected = mpi_check.expected_allreduce(world_size)
    return [{"rank": r, "host": hosts[r % len(hosts)], "allreduce": dict(expected),
             "ring_received": (r - 1) % world_size,
             "selection": {"pml": pml, "btl": ["self", "tcp"], "btl_used": ["self"]}}
            for r in range(world_size)]


@pytest.mark.parametrize("world_size,expected", [
    (1, {"sum": 1, "max": 0}), (3, {"sum": 6, "max": 2}), (1024, {"sum": 524800, "max": 1023})])
def test_expected_allreduce_is_exact(world_size, expected):
    assert mpi_check.expected_allreduce(world_size) == expected
    assert expected["sum"] == sum(r + 1 for r in range(world_size))


def test_ring_neighbours():
    assert mpi_check.ring_neighbours(0, 3) == (1, 2)
    assert mpi_check.ring_neighbours(2, 3) == (0, 1)
    assert mpi_check.ring_neighbours(0, 1) == (0, 0)


def test_good_ranks_pass():
    assert mpi_check.check_ranks(rank_reports(5), 5) == []


def test_wrong_allreduce_ring_and_missing_rank_are_named():
    reports = rank_reports(4)
    reports[2]["allreduce"] = {"sum": 9, "max": 3}
    reports[3]["ring_received"] = 1
    problems = mpi_check.check_ranks(reports, 4)
    assert problems == [
        'rank 2 got allreduce {"max": 3, "sum": 9}, expected {"max": 3, "sum": 10}',
        "rank 3 received 1 in the ring, expected 2 (the rank of its left neighbour)"]
    assert mpi_check.check_ranks(rank_reports(4)[:3], 4) == ["ranks [0, 1, 2] reported, expected 0..3"]


def test_mixed_pml_fails():
    reports = rank_reports(2)
    reports[1]["selection"]["pml"] = "ucx"
    assert mpi_check.check_ranks(reports, 2) == ["ranks selected different PMLs: ob1, ucx"]


def test_report_says_what_ran():
    reports = list(reversed(rank_reports(4, hosts=("node2", "node1"))))
    report = mpi_check.build_report(reports, 4, "Open MPI v5.0.7, package: Open MPI\nmore\0", "Open MPI 5.0.7",
                                    expect_world_size=4, expect_nnodes=2)
    assert report["passed"] is True, report["problems"]
    assert report["ranks"] == [{"rank": 0, "host": "node2"}, {"rank": 1, "host": "node1"},
                               {"rank": 2, "host": "node2"}, {"rank": 3, "host": "node1"}]
    assert report["hosts"] == ["node1", "node2"] and report["nnodes"] == 2
    assert report["mpi_library"] == "Open MPI v5.0.7, package: Open MPI"
    assert report["mpi_vendor"] == "Open MPI 5.0.7"
    assert report["allreduce"] == {"expected": {"sum": 10, "max": 3}, "got": {"sum": 10, "max": 3}}
    assert (report["pml"], report["btl"], report["btl_used"]) == ("ob1", ["self", "tcp"], ["self"])


def test_fabric_settings_of_each_rank_are_listed_with_it():
    reports = rank_reports(2, hosts=("node1", "node2"))
    reports[1]["fabric"] = mpi_check.fabric_settings({"NCCL_IB_HCA": "mlx5_0", "UCX_TLS": "rc", "HOME": "/x"},
                                                     exists=lambda path: False)
    report = mpi_check.build_report(reports, 2, "x", "x")
    assert "fabric" not in report["ranks"][0]
    assert report["ranks"][1]["fabric"] == {"env": {"NCCL_IB_HCA": "mlx5_0", "UCX_TLS": "rc"}, "nccl_conf": False,
                                            "ucx_conf": False}


def test_report_without_selection():
    reports = rank_reports(2)
    for report in reports:
        report["selection"] = None
    report = mpi_check.build_report(reports, 2, "MPICH Version: 4.2.0\n", "MPICH 4.2.0")
    assert report["passed"] is True
    assert (report["pml"], report["btl"], report["btl_used"]) == (None, None, None)


def test_one_node_when_two_expected_fails():
    report = mpi_check.build_report(rank_reports(2), 2, "x", "x", expect_world_size=3, expect_nnodes=2)
    assert report["passed"] is False
    assert report["problems"] == ["world size is 2, expected 3", "ranks ran on 1 distinct host(s), expected 2"]


def test_parse_ompi_selection_on_real_open_mpi_4_1_output():
    header, body = load(CAPTURE)
    by_process = mpi_check.ompi_selection_by_process(body)
    assert len(by_process) == 3
    for process, selection in by_process.items():
        assert process.startswith("vm:")
        assert selection == {"pml": "ob1", "btl": ["self", "tcp", "vader"], "btl_used": ["self", "vader"]}
    assert mpi_check.parse_ompi_selection(body) == selection
    # The script's own report, printed in the same run, says the same.
    printed = json.loads(header[2][2:][len(mpi_check.RESULT_PREFIX):])
    assert (printed["pml"], printed["btl"], printed["btl_used"]) == ("ob1", selection["btl"], selection["btl_used"])
    assert printed["passed"] is True and printed["world_size"] == 3


def test_every_verbose_line_of_the_capture_is_kept_back():
    _unused, body = load(CAPTURE)
    assert all(mpi_check.OMPI_VERBOSE_RE.match(line) for line in body.splitlines())


def test_pml_is_told_apart_from_other_frameworks_selected_components():
    # Open MPI 5.0 messages, each built from a format string of v5.0.7 (pml_base_select.c, mtl_base_frame.c,
    # osc_base_init.c, btl_base_select.c) behind opal_output's "[host:pid] " prefix; not a capture.
    cm_over_ofi = "\n".join([
        "[gpu1:04242] select: initializing mtl component ofi",
        "[gpu1:04242] select: init returned success",
        "[gpu1:04242] select: component ofi selected",
        "[gpu1:04242] select: initializing pml component ucx",
        "[gpu1:04242] select: init returned failure for component ucx",
        "[gpu1:04242] select: initializing pml component cm",
        "[gpu1:04242] select: init returned priority 30",
        "[gpu1:04242] selected cm best priority 30",
        "[gpu1:04242] select: component cm selected",
        "[gpu1:04242] select: component ucx selected",  # osc ucx, at the first MPI_Win
    ])
    assert mpi_check.parse_ompi_selection(cm_over_ofi) == {"pml": "cm", "btl": [], "btl_used": []}
    ucx = "\n".join([
        "[gpu1:04243] select: initializing btl component self",
        "[gpu1:04243] select: init of component self returned success",
        "[gpu1:04243] select: initializing btl component uct",
        "[gpu1:04243] select: init of component uct returned failure",
        "[gpu1:04243] select: initializing pml component ucx",
        "[gpu1:04243] select: init returned priority 51",
        "[gpu1:04243] selected ucx best priority 51",
        "[gpu1:04243] select: component ucx selected",
    ])
    assert mpi_check.parse_ompi_selection(ucx) == {"pml": "ucx", "btl": ["self"], "btl_used": []}
    assert mpi_check.parse_ompi_selection("") == {"pml": None, "btl": [], "btl_used": []}


def test_stderr_tap_keeps_verbose_lines_and_passes_the_rest(tmp_path):
    """The tap under a real fd 2, in a child process: Open MPI's lines kept, everything else passed on."""
    code = "\n".join([
        "import importlib.util, os, sys",
        "sys.path.insert(0, %r)" % os.path.dirname(SCRIPT),
        "spec = importlib.util.spec_from_file_location('m', %r)" % SCRIPT,
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)",
        "tap = m.StderrTap(pass_verbose=False); tap.start()",
        "os.write(2, b'[vm:00042] select: component ob1 selected\\n')",
        "os.write(2, b'a real warning\\n')",
        "os.write(2, b'no newline yet')",
        "kept = tap.text()",
        "print('boom', file=sys.stderr)",
        "tap.stop()",
        "print(repr(kept))",
    ])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr("[vm:00042] select: component ob1 selected\n")
    assert proc.stderr == "a real warning\nno newline yetboom\n"


def _mpirun_with_mpi4py():
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun is not installed (Debian: apt-get install openmpi-bin python3-mpi4py)")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import mpi4py"], capture_output=True, check=False).returncode != 0:
        pytest.skip("%s cannot import mpi4py (Debian: apt-get install python3-mpi4py)" % SYSTEM_PYTHON)
    version = subprocess.run([mpirun, "--version"], capture_output=True, check=False, text=True).stdout
    if "Open MPI" not in version:
        pytest.skip("this test passes Open MPI's mpirun options; mpirun here is: %s" % version.strip())
    return mpirun


def _run(args, tmp_path, env=None):
    # --allow-run-as-root and --oversubscribe only here: the test host runs as root and may have few cores.
    return subprocess.run(
        [_mpirun_with_mpi4py(), "--allow-run-as-root", "--oversubscribe", "-np", "3", SYSTEM_PYTHON, SCRIPT] + args,
        capture_output=True, check=False, text=True, timeout=120, cwd=str(tmp_path), env=env)


def _result(output):
    lines = [l for l in output.splitlines() if l.startswith(mpi_check.RESULT_PREFIX)]
    assert len(lines) == 1, output
    return json.loads(lines[0][len(mpi_check.RESULT_PREFIX):])


def test_three_ranks_under_mpirun_pass(tmp_path):
    proc = _run(["--expect-world-size", "3", "--expect-nnodes", "1"], tmp_path,
                env=dict(os.environ, NCCL_SOCKET_IFNAME="lo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _result(proc.stdout)
    assert result["passed"] is True, result["problems"]
    assert result["world_size"] == 3 and result["nnodes"] == 1
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2]
    assert result["allreduce"] == {"expected": {"sum": 6, "max": 2}, "got": {"sum": 6, "max": 2}}
    assert result["mpi_vendor"].startswith("Open MPI ")
    assert result["mpi_library"].startswith("Open MPI v")
    assert result["pml"] in ("ob1", "ucx", "cm")
    assert result["pml"] != "ob1" or "self" in result["btl_used"]
    assert "select:" not in proc.stderr  # Open MPI's verbose lines were kept back
    # Every rank says which fabric settings it saw, with its rank.
    for rank in result["ranks"]:
        assert rank["fabric"]["env"]["NCCL_SOCKET_IFNAME"] == "lo", rank
        assert rank["fabric"]["nccl_conf"] == os.path.exists("/etc/nccl.conf")


def test_wrong_world_size_fails(tmp_path):
    proc = _run(["--expect-world-size", "4"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = _result(proc.stdout)
    assert result["passed"] is False
    assert result["problems"] == ["world size is 3, expected 4"]


BINDER = os.path.join(ROOT, "roles", "image_security", "files", "gpufleet_bind.py")


def test_placement_record_takes_open_mpis_local_rank_and_the_binders_plan():
    record = mpi_check.placement_record({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "GPUFLEET_BIND_SLOT": "GPU 3",
                                         "GPUFLEET_BIND_CPUS": "48-59", "GPUFLEET_BIND_NUMA": "1"}, {48, 49, 50, 59})
    assert record == {"local_rank": 3, "gpu_uuid": None, "cpus": "48-50,59", "plan_slot": "GPU 3",
                      "plan_cpus": "48-59", "plan_numa": "1", "plan_skip": None}
    assert mpi_check.placement_record({"SLURM_LOCALID": "1"}, {0})["local_rank"] == 1
    assert mpi_check.placement_record({}, set())["cpus"] == ""


def test_each_rank_is_listed_with_where_it_ran():
    reports = rank_reports(2, hosts=("node1", "node2"))
    reports[1]["placement"] = mpi_check.placement_record({"OMPI_COMM_WORLD_LOCAL_RANK": "0"}, {0, 1})
    report = mpi_check.build_report(reports, 2, "x", "x")
    assert "placement" not in report["ranks"][0]
    assert report["ranks"][1]["placement"]["cpus"] == "0-1" and report["ranks"][1]["placement"]["local_rank"] == 0


def test_ranks_under_mpirun_through_the_binder_report_its_plan(tmp_path):
    """As validate runs it in the image: mpirun --bind-to none gpufleet-bind python3 check."""
    cpus = sorted(os.sched_getaffinity(0))
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps({"numa_nodes": [{"node": 0, "cpus": mpi_check.format_cpulist(cpus)}],
                                     "gpus": []}))
    proc = subprocess.run(
        [_mpirun_with_mpi4py(), "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2",
         SYSTEM_PYTHON, BINDER, SYSTEM_PYTHON, SCRIPT, "--expect-world-size", "2"],
        capture_output=True, check=False, text=True, timeout=120, cwd=str(tmp_path),
        env=dict(os.environ, GPUFLEET_PLACEMENT=str(placement)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [rank["placement"] for rank in _result(proc.stdout)["ranks"]]
    assert [r["local_rank"] for r in records] == [0, 1]
    for record in records:
        assert record["plan_slot"] == "NUMA node 0" and record["plan_skip"] is None
        assert record["cpus"] == record["plan_cpus"]
