# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Verdicts of the validate steps that run a workload: DDP (torchrun) and MPI (mpirun), on the host and in the image.

Each verdict function takes what the Ansible task registered (rc, stdout, stderr) plus what the run was meant to
be (hosts, world size, floors) and returns ``{"status": passed|failed|skipped, "reason": str, "detail": dict}``.
The reason says what ran: backend, transport, ranks, hosts and bandwidth. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible_collections.gpufleet.cluster.plugins.module_utils import placement
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.cluster import node_address
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.nccl import (
    parse_nccl_debug, transport_problems, transport_summary)

DDP_PREFIX = "GPUFLEET_DDP_RESULT "
MPI_PREFIX = "GPUFLEET_MPI_RESULT "
# The node's settings the training container must see: what the interconnect role writes to the fabric env file.
FABRIC_PREFIXES = ("NCCL_", "UCX_")
FABRIC_ENV_FILE = "/etc/gpufleet/fabric.env"
MPI_HOSTFILE = "/etc/gpufleet/hostfile"


def prefixed_json(text, prefix):
    """The last ``prefix {json}`` object in text, or {}."""
    found = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith(prefix):
            try:
                value = json.loads(line[len(prefix):])
            except ValueError:
                continue
            if isinstance(value, dict):
                found = value
    return found


def ddp_result(stdout):
    return prefixed_json(stdout, DDP_PREFIX)


def mpi_result(stdout):
    return prefixed_json(stdout, MPI_PREFIX)


def mpi_hostfile_hosts(text):
    """Host entries of an Open MPI hostfile, in order ("node1 slots=8" -> "node1"); comments skipped."""
    hosts = []
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            hosts.append(line.split()[0])
    return hosts


def _by_address(hostvars, hosts):
    by_address = {}
    for host in hosts:
        hv = hostvars[host]
        facts = hv.get("ansible_facts") or {}
        expected = facts.get("hostname") or hv.get("ansible_hostname") or host
        for key in (node_address(hv, host), host):
            by_address[key] = (host, expected)
    return by_address


def mpi_hosts_for(hostfile_text, hostvars, hosts):
    """The hostfile entries that belong to the given inventory hosts, in hostfile order."""
    by_address = _by_address(hostvars, hosts)
    return [entry for entry in mpi_hostfile_hosts(hostfile_text) if entry in by_address]


def rank_placement(seen, entries, hostvars, hosts):
    """Check that rank i ran on the node of entries[i] (hostfile order, one rank per node).

    seen: {rank: hostname}. Returns {"ranks": [{rank, host, expected, inventory_host, ok}], "problems": [...]}.
    """
    by_address = _by_address(hostvars, hosts)
    ranks, problems = [], []
    for index, entry in enumerate(entries):
        inventory_host, expected = by_address.get(entry, (None, entry))
        ran_on = seen.get(index)
        ok = ran_on is not None and ran_on.split(".")[0] == expected.split(".")[0]
        ranks.append({"rank": index, "host": ran_on, "expected": expected, "inventory_host": inventory_host,
                      "ok": ok})
        if ran_on is None:
            problems.append("rank %d (%s) reported nothing" % (index, entry))
        elif not ok:
            problems.append("rank %d ran on %s, expected %s" % (index, ran_on, expected))
    extra = sorted(set(seen) - set(range(len(entries))))
    if extra:
        problems.append("unexpected ranks %s" % ", ".join(str(r) for r in extra))
    if not entries:
        problems.append("the hostfile lists none of the nodes checked")
    return {"ranks": ranks, "problems": problems}


def last_line(*texts):
    """The last non-empty line of the given outputs, for a reason when a tool failed without telling us more."""
    for text in reversed(texts):
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return ""


def parse_env_file(text):
    """KEY -> VALUE of a Docker --env-file: blank lines and lines starting with # are skipped, leading blanks
    of a line too, the value is everything after the first '=' as written (Docker does not unquote it).

    A line with a name alone (Docker then takes the value from the calling environment) carries no value of the
    node's and is left out.
    """
    settings = {}
    for raw in (text or "").splitlines():
        line = raw.lstrip()
        if line.startswith("\ufeff"):
            line = line[1:]
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if key and not any(ch.isspace() for ch in key):
            settings[key] = value
    return settings


def env_file_text(read):
    """The text of a file as a verdict takes it: text as it is, or what ansible.builtin.slurp registered
    (base64 content; no content: the file was not read, None)."""
    if read is None or isinstance(read, str):
        return read
    if not isinstance(read, dict) or "content" not in read:
        return None
    return base64.b64decode(read["content"]).decode("utf-8", "replace")


def fabric_comparison(seen, node_env_text, path=FABRIC_ENV_FILE, caller_env=None):
    """Compare the fabric settings a check saw in the container with the node's fabric env file.

    seen: the check's own report, {"env": {NCCL_*/UCX_* it saw}, "nccl_conf": bool, "ucx_conf": bool}, or None
    when the check reported none. node_env_text: the file's text or its slurp result, None (or a slurp result
    without content) when the node has no such file.
    caller_env: what the run itself set (validate_nccl_env); a key set there may differ from the node's value.
    Returns (problems, detail): every NCCL_*/UCX_* setting of the file must have reached the container with the
    file's value (or the caller's, for a key the caller set), else the problem names the key.
    """
    node_env_text = env_file_text(node_env_text)
    caller_env = dict((key, str(value)) for key, value in (caller_env or {}).items())
    detail = {"node_env_file": path, "node_env_present": node_env_text is not None}
    if seen is not None:
        detail.update(ran=dict(seen.get("env") or {}), nccl_conf=seen.get("nccl_conf"),
                      ucx_conf=seen.get("ucx_conf"))
    if node_env_text is None:
        detail["note"] = "no %s on the node: the container's settings were not compared with it" % path
        return [], detail
    node = parse_env_file(node_env_text)
    compared = dict((key, value) for key, value in node.items() if key.startswith(FABRIC_PREFIXES))
    detail["node"] = compared
    detail["not_compared"] = sorted(set(node) - set(compared))
    if seen is None:
        return ["the check did not report the NCCL/UCX settings it saw in the container"], detail
    ran = detail["ran"]
    missing = sorted(key for key in compared if key not in ran)
    problems = ["%s of %s did not reach the container" % (", ".join(missing), path)] if missing else []
    set_by_caller = []
    for key in sorted(compared):
        if key not in ran or ran[key] == compared[key]:
            continue
        if key in caller_env and ran[key] == caller_env[key]:
            set_by_caller.append(key)
        else:
            problems.append("%s is %r in the container, %r in %s" % (key, ran[key], compared[key], path))
    detail.update(missing=missing, set_by_caller=set_by_caller)
    return problems, detail


def _fabric_words(detail):
    if not detail.get("node_env_present"):
        return "fabric env: no %s on the node" % detail.get("node_env_file")
    node, ran = detail.get("node") or {}, detail.get("ran") or {}
    words = "fabric env: %d of %d setting(s) of %s seen in the container" % (
        len([key for key in node if key in ran]), len(node), detail.get("node_env_file"))
    if detail.get("set_by_caller"):
        words += " (%s set by the run)" % ", ".join(detail["set_by_caller"])
    return words


def _skipped(reason, **detail):
    return {"status": "skipped", "reason": reason, "detail": detail}


def _join_hosts(hosts, limit=8):
    hosts = list(hosts or [])
    if len(hosts) <= limit:
        return ", ".join(hosts)
    return "%s and %d more" % (", ".join(hosts[:limit]), len(hosts) - limit)


def ddp_verdict(run, *, backend="gloo", scope="node", enabled=True, skip_reason="", expect_world_size=None,
                expect_nnodes=None, min_busbw_gbps=0.0, active_rdma_ports=0, fabric_env=None,
                fabric_env_path=FABRIC_ENV_FILE, nccl_env=None):
    """Verdict of one torchrun DDP check (scope "node" or "fleet"); every argument after the run is a keyword.

    run: the registered command result ({rc, stdout, stderr} or {skipped: true}). backend: gloo or nccl.
    Skipped, with the first reason that holds: skip_reason (why the workload steps cannot run on this node), "check
    off" when not enabled, and for a fleet run expected on fewer than two nodes "no other node of the play runs
    <backend> with a verified image"; then a run that did not happen is skipped as "not run".
    On nccl the NCCL_DEBUG=INFO lines are read back: a multi-node run on a node with active RDMA ports that
    fell back to sockets fails, whatever torchrun's exit status. fabric_env: the text of this node's fabric env
    file (None: the node has none); every NCCL_*/UCX_* setting in it must be what the check saw in the
    container (see fabric_comparison), except those the run set itself: nccl_env, the environment the play gives
    an NCCL run (a gloo run is given none).
    """
    if not skip_reason and not enabled:
        skip_reason = "check off"
    if not skip_reason and scope == "fleet" and int(expect_nnodes or 0) < 2:
        skip_reason = "no other node of the play runs %s with a verified image" % backend
    caller_env = (nccl_env or {}) if backend == "nccl" else {}
    if skip_reason or not run or run.get("skipped"):
        return _skipped(skip_reason or "not run", backend=backend)
    stdout, stderr = run.get("stdout", ""), run.get("stderr", "")
    result = ddp_result(stdout)
    problems = list(result.get("problems") or [])
    detail = {"backend": backend, "scope": scope, "world_size": result.get("world_size"),
              "nnodes": result.get("nnodes"), "hosts": result.get("hosts") or [],
              "busbw_gbps": result.get("busbw_gbps"), "algbw_gbps": result.get("algbw_gbps"),
              "min_busbw_gbps": float(min_busbw_gbps or 0), "size_bytes": result.get("size_bytes"),
              "torch": result.get("torch"), "nccl_version": result.get("nccl"),
              "cuda_version": result.get("cuda_version"), "device": result.get("device")}
    if backend == "nccl":
        nccl = parse_nccl_debug(stdout + "\n" + stderr)
        detail["nccl"] = nccl
        detail["transport"] = transport_summary(nccl)
        if run.get("rc") == 0 and result:
            problems += transport_problems(nccl, int(active_rdma_ports or 0), multi_node=(scope == "fleet"))
    else:
        detail["transport"] = "TCP sockets (gloo; NCCL not run: no NVIDIA GPU)"
    if not result:
        problems.append("the DDP check printed no result (%s)" % (last_line(stdout, stderr) or "no output"))
    elif result.get("backend") and result.get("backend") != backend:
        problems.append("ran with backend %s, expected %s" % (result.get("backend"), backend))
    if result and expect_world_size and result.get("world_size") != int(expect_world_size):
        problems.append("world size %s, expected %s" % (result.get("world_size"), expect_world_size))
    if result and expect_nnodes and (result.get("nnodes") or len(detail["hosts"])) < int(expect_nnodes):
        problems.append("ranks ran on %s node(s), expected %s"
                        % (result.get("nnodes") or len(detail["hosts"]), expect_nnodes))
    if result:
        fabric_problems, detail["fabric"] = fabric_comparison(result.get("fabric"), fabric_env, fabric_env_path,
                                                              caller_env)
        problems += fabric_problems
    if run.get("rc") not in (0, None) and not problems:
        problems.append("torchrun exited %s: %s" % (run.get("rc"), last_line(stderr, stdout)))
    problems = list(dict.fromkeys(problems))
    detail["problems"] = problems
    busbw = result.get("busbw_gbps")
    floor = float(min_busbw_gbps or 0)
    what = "%s, %s rank(s) on %s" % (backend, result.get("world_size", "?"), _join_hosts(detail["hosts"]) or "?")
    if busbw is not None:
        what += "; all_reduce busbw %s GB/s" % busbw
        what += " (floor %s)" % floor if floor else " (no floor set)"
    what += "; transport: %s" % detail["transport"]
    if "fabric" in detail:
        what += "; " + _fabric_words(detail["fabric"])
    if problems:
        return {"status": "failed", "reason": "; ".join(problems) + " [" + what + "]", "detail": detail}
    return {"status": "passed", "reason": what, "detail": detail}


def _values_words(values):
    if isinstance(values, dict):
        return ", ".join("%s %s" % (key, values[key]) for key in sorted(values))
    return str(values)


def _allreduce_words(allreduce):
    got, expected = allreduce.get("got"), allreduce.get("expected")
    if not got and not expected:
        return "no allreduce result"
    words = _values_words
    if got == expected:
        return "allreduce exact (%s)" % words(got)
    return "allreduce got %s, expected %s" % (words(got or {}), words(expected or {}))


def what_ran(reports, steps=("image", "ddp_multi_node", "mpi", "mpi_image")):
    """The fleet report's "what ran" lines: each (step, status, reason) once, with the nodes it was seen on.

    reports: the per-node reports ({node, steps: [{step, status, reason}]}). Skipped steps are left out.
    """
    lines, index = [], {}
    for report in reports:
        for step in report.get("steps") or []:
            if step.get("step") not in steps or step.get("status") == "skipped":
                continue
            key = (step["step"], step.get("status"), step.get("reason"))
            if key not in index:
                index[key] = {"step": step["step"], "status": step.get("status"), "reason": step.get("reason"),
                              "nodes": []}
                lines.append(index[key])
            index[key]["nodes"].append(report.get("node"))
    order = dict((name, position) for position, name in enumerate(steps))
    return sorted(lines, key=lambda line: order[line["step"]])


def mpi_skip_reason(where, entries, enabled=True, skip_reason="", hostfile=MPI_HOSTFILE, hostfile_found=True,
                    not_ready=()):
    """Why an mpirun of the MPI check did not run, '' when nothing stopped it: "check off" when not enabled, then
    skip_reason; on the host a missing hostfile or one that lists none of the nodes checked; in the image a hostfile
    without those nodes, or nodes of the run that cannot run the verified image (not_ready)."""
    if not enabled:
        return "check off"
    if skip_reason:
        return skip_reason
    if where == "host":
        if not hostfile_found:
            return "no MPI hostfile at %s" % hostfile
        return "" if entries else "the hostfile at %s lists none of the nodes checked" % hostfile
    if not entries:
        return "no usable MPI hostfile"
    return "nodes without a runnable verified image: %s" % ", ".join(not_ready) if not_ready else ""


def mpi_verdict(run, *, where, entries, hostvars, hosts, me, enabled=True, skip_reason="", hostfile=MPI_HOSTFILE,
                hostfile_found=True, not_ready=(), fabric_env=None, fabric_env_path=FABRIC_ENV_FILE):
    """Verdict of one mpirun of the MPI check (where: "host" or "image"), for inventory host ``me``; every argument
    after the run is a keyword.

    entries: the hostfile entries mpirun was given (one rank per node, in order). A run that could not start is
    skipped with mpi_skip_reason's reason, except on the host with the check on: a host MPI check that was asked
    for and could not run fails, with that reason. In the image, the settings of ``me``'s fabric env file
    (fabric_env: its text, None when the node has none) must be what ``me``'s rank saw in its container (see
    fabric_comparison).
    """
    reason = mpi_skip_reason(where, entries, enabled, skip_reason, hostfile, hostfile_found, not_ready)
    if reason or not run or run.get("skipped"):
        verdict = _skipped(reason or "not run", where=where)
        if where == "host" and enabled:
            verdict["status"] = "failed"
        return verdict
    stdout, stderr = run.get("stdout", ""), run.get("stderr", "")
    result = mpi_result(stdout)
    seen = dict((int(r["rank"]), r.get("host")) for r in result.get("ranks") or [] if "rank" in r)
    placement = rank_placement(seen, entries, hostvars, hosts)
    problems = list(result.get("problems") or [])
    if not result:
        problems.append("the MPI check printed no result (mpirun exited %s: %s)"
                        % (run.get("rc"), last_line(stderr, stdout) or "no output"))
    else:
        problems += placement["problems"]
    if run.get("rc") not in (0, None) and not problems:
        problems.append("mpirun exited %s: %s" % (run.get("rc"), last_line(stderr, stdout)))
    mine = [r for r in placement["ranks"] if r["inventory_host"] == me]
    if result and not mine:
        problems.append("this node is not in the hostfile")
    fabric = where_mine = None
    if result and mine and where == "image":
        reported = dict((int(r["rank"]), r) for r in result.get("ranks") or [] if "rank" in r)
        fabric_problems, fabric = fabric_comparison(reported.get(mine[0]["rank"], {}).get("fabric"), fabric_env,
                                                    fabric_env_path)
        problems += ["rank %d: %s" % (mine[0]["rank"], problem) for problem in fabric_problems]
        # Where this node's rank ran, for the placement step (None from a check that does not report it).
        where_mine = reported.get(mine[0]["rank"], {}).get("placement")
        if isinstance(where_mine, dict):
            where_mine = dict(where_mine, rank=mine[0]["rank"])
    problems = list(dict.fromkeys(problems))
    launched = ("host Open MPI over the SSH mesh" if where == "host"
                else "mpirun in the training image, ranks started in the image on every node")
    allreduce = result.get("allreduce") or {}
    what = "%s: %s rank(s) on %s; %s; pml %s, btl %s; %s" % (
        launched, result.get("world_size", "?"), _join_hosts(result.get("hosts") or []) or "?",
        (result.get("mpi_library") or "MPI library unknown").split(",")[0],
        result.get("pml") or "not reported", ",".join(result.get("btl_used") or []) or "not reported",
        _allreduce_words(allreduce))
    if fabric is not None:
        what += "; " + _fabric_words(fabric)
    detail = {"where": where, "ranks": placement["ranks"], "hosts": result.get("hosts") or [],
              "world_size": result.get("world_size"), "mpi_library": result.get("mpi_library"),
              "pml": result.get("pml"), "btl": result.get("btl"), "btl_used": result.get("btl_used"),
              "allreduce": allreduce, "problems": problems}
    if fabric is not None:
        detail["fabric"] = fabric
    if where_mine is not None:
        detail["placement"] = where_mine
    if problems:
        return {"status": "failed", "reason": "; ".join(problems) + " [" + what + "]", "detail": detail}
    return {"status": "passed", "reason": what, "detail": detail}


def _cpu_set(text):
    """CPU numbers of a kernel cpulist (placement.parse_cpulist), or None where it is empty or not one."""
    try:
        return set(placement.parse_cpulist(text)) or None
    except ValueError:
        return None


def _rank_placement_problem(name, record, placement, gpus):
    """What is wrong with where one rank ran (a placement record of the DDP or MPI check), or None with the line
    that says where it ran."""
    cpus = _cpu_set(record.get("cpus"))
    if record.get("unreadable") is not None:
        return "%s: its placement record is unreadable" % name, None
    if record.get("plan_skip"):
        return "%s: the binder bound nothing: %s" % (name, record["plan_skip"]), None
    if record.get("plan_cpus") is None:
        return "%s: no binder ran (no GPUFLEET_BIND_* plan in its environment)" % name, None
    if cpus != _cpu_set(record["plan_cpus"]):
        return "%s: runs on CPUs %s, the binder's plan gave %s" % (name, record.get("cpus"), record["plan_cpus"]), None
    if not gpus:
        return None, "%s %s CPUs %s" % (name, record.get("plan_slot"), record.get("cpus"))
    gpu = gpus.get(record.get("gpu_uuid")) if record.get("gpu_uuid") is not None else None
    if gpu is None:
        # No UUID (a torch that gives none, or the MPI check, which uses no GPU): the GPU the plan named (the binder
        # has CUDA number the GPUs as the map does).
        slot = str(record.get("plan_slot") or "")
        gpu = next((g for g in placement.get("gpus") or [] if slot == "GPU %s" % g.get("index")), None)
    if gpu is None:
        return "%s: its GPU %s is not in the placement map" % (
            name, record.get("gpu_uuid") or record.get("plan_slot")), None
    allowed = _cpu_set(gpu.get("cpus")) or set()
    if not cpus or not cpus <= allowed:
        return "%s on GPU %s: CPUs %s lie outside GPU %s's NUMA node %s (CPUs %s)" % (
            name, gpu.get("index"), record.get("cpus"), gpu.get("index"), gpu.get("numa_node"), gpu.get("cpus")), None
    return None, "%s GPU %s CPUs %s" % (name, gpu.get("index"), record.get("cpus"))


def placement_verdict(run, *, placement=None, mpi=None, enabled=True, skip_reason=""):
    """Verdict of the placement step, from the node-alone DDP check and the in-image MPI check, both run through the
    rank binder.

    run: the registered DDP command result; mpi: the mpi_image step's verdict ({status, detail}; its detail's
    ``placement`` is where this node's MPI rank ran), None when there is none; placement: the node's placement map
    (None: the node has none). Each rank must have been bound (no binder skip), must run on exactly the CPUs the
    binder's plan gave it, and on a node whose map lists GPUs, on CPUs of its GPU's NUMA node (the GPU's CPUs in the
    map). A failure names rank, GPU and CPUs. Skipped with skip_reason, "check off" when not enabled, or "not run"
    when neither check ran."""
    if not skip_reason and not enabled:
        skip_reason = "check off"
    ddp_ran = bool(run) and not run.get("skipped")
    mpi_ran = bool(mpi) and mpi.get("status") in ("passed", "failed")
    if skip_reason or not (ddp_ran or mpi_ran):
        return _skipped(skip_reason or "not run")
    result = ddp_result(run.get("stdout", "")) if ddp_ran else None
    records = result.get("placement") if result else None
    mpi_record = (mpi.get("detail") or {}).get("placement") if mpi_ran else None
    detail = {"ranks": records, "mpi_rank": mpi_record}
    if not placement:
        return {"status": "failed", "reason": "no placement map on the node to check the ranks against",
                "detail": detail}
    problems, lines = [], []
    if ddp_ran and not records:
        problems.append("the DDP check reported no rank placement (%s)"
                        % ("no result" if not result else "an image or check without it"))
    if mpi_ran and not mpi_record:
        problems.append("the in-image MPI check reported no placement for this node's rank")
    gpus = dict((gpu.get("uuid"), gpu) for gpu in placement.get("gpus") or [])
    named = [("DDP rank %s" % r.get("rank"), r) for r in sorted(records or [], key=lambda r: r.get("rank", 0))]
    if mpi_record:
        named.append(("MPI rank %s" % mpi_record.get("rank"), mpi_record))
    for name, record in named:
        problem, line = _rank_placement_problem(name, record, placement, gpus)
        problems += [problem] if problem else []
        lines += [line] if line else []
    detail["checked"] = ("each rank on its GPU's CPUs and on the binder's plan" if gpus
                         else "no GPU in the map: each rank on the CPUs the binder's plan gave it (NUMA nodes in the "
                         "GPUs' place)")
    not_run = [what for what, ran in (("the node-alone DDP check", ddp_ran), ("the in-image MPI check", mpi_ran))
               if not ran]
    if not_run:
        detail["not_run"] = not_run
    if problems:
        return {"status": "failed", "reason": "; ".join(problems), "detail": detail}
    return {"status": "passed", "reason": "%d rank(s), %s: %s%s" % (
        len(lines), detail["checked"], ", ".join(lines),
        "; not run: %s" % ", ".join(not_run) if not_run else ""), "detail": detail}
