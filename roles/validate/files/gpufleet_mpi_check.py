#!/usr/bin/env python3
"""gpufleet MPI check: proves that MPI itself works across the ranks, not only the launcher.

    mpirun --hostfile hosts -np 4 --map-by ppr:1:node python3 gpufleet_mpi_check.py --expect-nnodes 4

What it proves:
  * MPI_Init succeeds on every rank (importing mpi4py.MPI initialises MPI),
  * an MPI_Allreduce of known integers gives the exact sum of (rank + 1) and max of rank on every rank,
  * a point-to-point ring works: each rank sends its rank to rank + 1 and receives rank - 1,
  * the ranks ran where they were meant to (--expect-world-size, --expect-nnodes).
With Open MPI it also reports the PML it selected and the BTLs it initialised and used: each rank raises
pml_base_verbose and btl_base_verbose to 10 for itself (unless they are set already), reads Open MPI's own
selection messages from its stderr and passes every other stderr line on unchanged.
Every rank also reports the fabric settings it saw (its NCCL_* and UCX_* variables, whether /etc/nccl.conf and
/etc/ucx/ucx.conf were there) and where it ran (its local rank, the CPUs it may run on and the plan the rank binder
gave it, when one ran), listed with its rank, for validate to compare with that node's own.
Rank 0 prints one JSON line prefixed `GPUFLEET_MPI_RESULT `; every rank exits 0 (pass) or 1 (fail), as rank 0
decided. Needs only python3 and mpi4py.
"""
import argparse
import array
import json
import os
import re
import socket
import sys
import threading
import traceback

# The DDP check lies beside this file wherever validate puts the checks (the node's checks directory, mounted into
# the image's containers): one placement record for both checks.
from gpufleet_ddp_check import format_cpulist, placement_record  # noqa: F401 pylint: disable=unused-import

RESULT_PREFIX = "GPUFLEET_MPI_RESULT "
# Level 10 of these prints the selection messages below. Debug builds of Open MPI also print BTL_VERBOSE
# lines then; those pass on, as they look the same as BTL errors.
VERBOSE_VARS = ("OMPI_MCA_pml_base_verbose", "OMPI_MCA_btl_base_verbose")

# Open MPI's opal_output prefixes every verbose line with "[host:pid] " (opal/util/output.c, 4.1 and 5.0).
OMPI_LINE_RE = re.compile(r"^\[([^\]\s]+:\d+)\] (.*)$")
# Lines of the frameworks this check makes verbose, kept out of the stderr that passes on.
OMPI_VERBOSE_RE = re.compile(r"^\[[^\]\s]+:\d+\] (mca: base: |mca: bml: |select: |selected |check:select: )")
# From ompi/mca/pml/base/pml_base_select.c, opal/mca/btl/base/btl_base_select.c and
# ompi/mca/bml/r2/bml_r2.c (the same strings in Open MPI 4.1 and 5.0).
INITIALIZING_RE = re.compile(r"^select: initializing (\S+) component (\S+)$")
SELECTED_RE = re.compile(r"^select: component (\S+) selected$")
BTL_INIT_OK_RE = re.compile(r"^select: init of component (\S+) returned success$")
BTL_USED_RE = re.compile(r"^mca: bml: Using (\S+) btl for send to ")
FABRIC_PREFIXES = ("NCCL_", "UCX_")
SETTINGS_FILES = {"nccl_conf": "/etc/nccl.conf", "ucx_conf": "/etc/ucx/ucx.conf"}


def fabric_settings(environ, exists=os.path.exists):
    """The fabric settings this rank sees: its NCCL_*/UCX_* variables and which settings files exist."""
    seen = {"env": dict((key, environ[key]) for key in sorted(environ) if key.startswith(FABRIC_PREFIXES))}
    for name, path in sorted(SETTINGS_FILES.items()):
        seen[name] = bool(exists(path))
    return seen


def parse_ompi_selection(text):
    """Open MPI's PML and BTL choices in the verbose output of one process.

    Returns {"pml": name or None, "btl": [BTLs whose init succeeded], "btl_used": [BTLs used for a send]}.
    "select: component X selected" is printed by several frameworks (pml, mtl, osc, topo, ...): X counts as
    the PML only when the same process printed "select: initializing pml component X" before, and only the
    first time (the PML is chosen once, in MPI_Init; an osc component of the same name may follow later).
    """
    kinds, pml, btl, used = {}, None, [], []
    for raw in (text or "").splitlines():
        match = OMPI_LINE_RE.match(raw.strip())
        message = match.group(2) if match else raw.strip()
        found = INITIALIZING_RE.match(message)
        if found:
            kinds.setdefault(found.group(2), set()).add(found.group(1))
            continue
        found = SELECTED_RE.match(message)
        if found and pml is None and "pml" in kinds.get(found.group(1), ()):
            pml = found.group(1)
            continue
        found = BTL_INIT_OK_RE.match(message) or BTL_USED_RE.match(message)
        if found:
            names = btl if message.startswith("select:") else used
            if found.group(1) not in names:
                names.append(found.group(1))
    return {"pml": pml, "btl": sorted(btl), "btl_used": sorted(used)}


def ompi_selection_by_process(text):
    """parse_ompi_selection for each process ("host:pid") in merged output, such as mpirun's stderr."""
    lines = {}
    for raw in (text or "").splitlines():
        match = OMPI_LINE_RE.match(raw.strip())
        if match:
            lines.setdefault(match.group(1), []).append(raw)
    return {process: parse_ompi_selection("\n".join(found)) for process, found in lines.items()}


def expected_allreduce(world_size):
    """What the allreduce must return: sum of (rank + 1) and max of rank over all ranks (exact integers)."""
    return {"sum": world_size * (world_size + 1) // 2, "max": world_size - 1}


def ring_neighbours(rank, world_size):
    """(rank this rank sends to, rank it receives from) in the ring."""
    return (rank + 1) % world_size, (rank - 1) % world_size


def check_ranks(rank_reports, world_size):
    """Problems in the per-rank reports gathered on rank 0: {rank, host, allreduce, ring_received}."""
    problems = []
    expected = expected_allreduce(world_size)
    seen = sorted(report["rank"] for report in rank_reports)
    if seen != list(range(world_size)):
        problems.append("ranks %s reported, expected 0..%d" % (seen, world_size - 1))
    for report in sorted(rank_reports, key=lambda r: r["rank"]):
        if report["allreduce"] != expected:
            problems.append("rank %d got allreduce %s, expected %s" % (
                report["rank"], json.dumps(report["allreduce"], sort_keys=True), json.dumps(expected, sort_keys=True)))
        left = ring_neighbours(report["rank"], world_size)[1]
        if report["ring_received"] != left:
            problems.append("rank %d received %r in the ring, expected %d (the rank of its left neighbour)" % (
                report["rank"], report["ring_received"], left))
    pmls = sorted(set(str(r.get("selection", {}).get("pml")) for r in rank_reports if r.get("selection")))
    if len(pmls) > 1:
        problems.append("ranks selected different PMLs: %s" % ", ".join(pmls))
    return problems


def placement_problems(world_size, nnodes, expect_world_size, expect_nnodes):
    """Did the job run as large and as wide as it was meant to?"""
    found = []
    if expect_world_size is not None and world_size != expect_world_size:
        found.append("world size is %d, expected %d" % (world_size, expect_world_size))
    if expect_nnodes is not None and nnodes < expect_nnodes:
        found.append("ranks ran on %d distinct host(s), expected %d" % (nnodes, expect_nnodes))
    return found


def build_report(rank_reports, world_size, library, vendor, expect_world_size=None, expect_nnodes=None):
    """The JSON report rank 0 prints, from the gathered per-rank reports."""
    library = library.replace("\0", "").strip()  # MPI_Get_library_version's string may carry its NUL
    ordered = sorted(rank_reports, key=lambda r: r["rank"])
    hosts = sorted(set(r["host"] for r in ordered))
    problems = check_ranks(ordered, world_size)
    problems += placement_problems(world_size, len(hosts), expect_world_size, expect_nnodes)
    first = ordered[0] if ordered else {}
    selection = [r["selection"] for r in ordered if r.get("selection")]
    return {
        "passed": not problems, "problems": problems, "world_size": world_size,
        "ranks": [dict((key, r[key]) for key in ("rank", "host", "fabric", "placement") if key in r) for r in ordered],
        "hosts": hosts, "nnodes": len(hosts),
        "mpi_library": library.splitlines()[0].strip() if library else "",
        "mpi_vendor": vendor,
        "allreduce": {"expected": expected_allreduce(world_size), "got": first.get("allreduce")},
        # Rank 0's PML (check_ranks fails on a mix); the BTLs any rank initialised or used.
        "pml": (first.get("selection") or {}).get("pml"),
        "btl": sorted(set(b for s in selection for b in s["btl"])) if selection else None,
        "btl_used": sorted(set(b for s in selection for b in s["btl_used"])) if selection else None,
    }


class StderrTap:
    """Route this process's stderr (fd 2, also what Open MPI writes to) through a pipe.

    Lines of Open MPI's base/select verbose output are kept (and passed on only when `pass_verbose`); every
    other line is passed on to the real stderr as it arrives, so a failing MPI_Init still shows its messages.
    """
    MARK = b"\0gpufleet-stderr-tap-sync\n"

    def __init__(self, pass_verbose):
        self.pass_verbose = pass_verbose
        self.kept = []
        self.synced = threading.Event()

    def start(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self.reader = os.fdopen(read_fd, "rb")
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        for raw in self.reader:
            if raw.endswith(self.MARK):
                raw = raw[:-len(self.MARK)]  # what a writer left without a newline comes before the mark
                self.synced.set()
                if not raw:
                    continue
            verbose = OMPI_VERBOSE_RE.match(raw.decode("utf-8", "replace"))
            if verbose:
                self.kept.append(raw.decode("utf-8", "replace"))
            if not verbose or self.pass_verbose:
                os.write(self.saved, raw)

    def text(self):
        """Everything kept so far: a marker through the pipe makes sure earlier writes were read."""
        sys.stderr.flush()
        self.synced.clear()
        os.write(2, self.MARK)
        self.synced.wait(10)
        return "".join(self.kept)

    def stop(self):
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # closes the pipe's only write end: the reader sees end of file
        self.thread.join(10)
        os.close(self.saved)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect-world-size", type=int, default=None, help="fail unless exactly N ranks ran")
    parser.add_argument("--expect-nnodes", type=int, default=None, help="fail when fewer than N hosts took part")
    parser.add_argument("--no-ompi-selection", action="store_true",
                        help="leave stderr alone and do not report Open MPI's PML/BTL selection")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    fabric = fabric_settings(dict(os.environ))  # before this check sets its own verbose variables
    where = placement_record(os.environ, os.sched_getaffinity(0))
    tap = None
    if not args.no_ompi_selection:
        pass_verbose = any(name in os.environ for name in VERBOSE_VARS)
        for name in VERBOSE_VARS:
            os.environ.setdefault(name, "10")
        tap = StderrTap(pass_verbose)
        tap.start()
    try:
        from mpi4py import MPI  # MPI_Init

        comm = MPI.COMM_WORLD
        rank, world_size = comm.Get_rank(), comm.Get_size()
        total, largest, received = array.array("q", [0]), array.array("q", [0]), array.array("q", [-1])
        comm.Allreduce(array.array("q", [rank + 1]), total, op=MPI.SUM)
        comm.Allreduce(array.array("q", [rank]), largest, op=MPI.MAX)
        right, left = ring_neighbours(rank, world_size)
        comm.Sendrecv(array.array("q", [rank]), dest=right, sendtag=7, recvbuf=received, source=left, recvtag=7)
        mine = {"rank": rank, "host": socket.gethostname(), "ring_received": received[0],
                "allreduce": {"sum": total[0], "max": largest[0]}, "fabric": fabric, "placement": where,
                "selection": parse_ompi_selection(tap.text()) if tap else None}
        gathered = comm.gather(mine, root=0)
        code, report = 1, None
        if rank == 0:
            vendor_name, vendor_version = MPI.get_vendor()
            report = build_report(gathered, world_size, MPI.Get_library_version(),
                                  "%s %s" % (vendor_name, ".".join(str(v) for v in vendor_version)),
                                  args.expect_world_size, args.expect_nnodes)
            code = 0 if report["passed"] else 1
        code = comm.bcast(code, root=0)
        MPI.Finalize()  # while the tap still filters Open MPI's verbose close messages
    except Exception:
        if tap:
            tap.stop()
            tap = None
        traceback.print_exc()
        sys.stderr.flush()
        if "mpi4py.MPI" in sys.modules:  # the other ranks would wait for this one for ever
            sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(1)
        return 1
    finally:
        if tap:
            tap.stop()
    if report is not None:
        print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
