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

import json

from ansible_collections.gpufleet.cluster.plugins.module_utils.cluster import node_address
from ansible_collections.gpufleet.cluster.plugins.module_utils.nccl import (
    parse_nccl_debug, transport_problems, transport_summary)

DDP_PREFIX = "GPUFLEET_DDP_RESULT "
MPI_PREFIX = "GPUFLEET_MPI_RESULT "
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


def _skipped(reason, **detail):
    return {"status": "skipped", "reason": reason, "detail": detail}


def _join_hosts(hosts, limit=8):
    hosts = list(hosts or [])
    if len(hosts) <= limit:
        return ", ".join(hosts)
    return "%s and %d more" % (", ".join(hosts[:limit]), len(hosts) - limit)


def ddp_verdict(run, backend, scope, expect_world_size=None, expect_nnodes=None, min_busbw_gbps=0.0,
                active_rdma_ports=0, skip_reason=""):
    """Verdict of one torchrun DDP check (scope "node" or "fleet").

    run: the registered command result ({rc, stdout, stderr} or {skipped: true}). backend: gloo or nccl.
    On nccl the NCCL_DEBUG=INFO lines are read back: a multi-node run on a node with active RDMA ports that
    fell back to sockets fails, whatever torchrun's exit status.
    """
    if skip_reason or not run or run.get("skipped"):
        return _skipped(skip_reason or "not run", backend=backend)
    stdout, stderr = run.get("stdout", ""), run.get("stderr", "")
    result = ddp_result(stdout)
    problems = list(result.get("problems") or [])
    detail = {"backend": backend, "scope": scope, "world_size": result.get("world_size"),
              "nnodes": result.get("nnodes"), "hosts": result.get("hosts") or [],
              "busbw_gbps": result.get("busbw_gbps"), "algbw_gbps": result.get("algbw_gbps"),
              "min_busbw_gbps": float(min_busbw_gbps or 0), "size_bytes": result.get("size_bytes"),
              "torch": result.get("torch"), "device": result.get("device")}
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
        problems.append("ranks ran on %s node(s), expected %s" % (result.get("nnodes") or len(detail["hosts"]),
                                                                 expect_nnodes))
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


def mpi_verdict(run, where, entries, hostvars, hosts, me, skip_reason=""):
    """Verdict of one mpirun of the MPI check (where: "host" or "image"), for inventory host ``me``.

    entries: the hostfile entries mpirun was given (one rank per node, in order).
    """
    if skip_reason or not run or run.get("skipped"):
        return _skipped(skip_reason or "not run", where=where)
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
    problems = list(dict.fromkeys(problems))
    launched = ("host Open MPI over the SSH mesh" if where == "host"
                else "mpirun in the training image, ranks started in the image on every node")
    allreduce = result.get("allreduce") or {}
    what = "%s: %s rank(s) on %s; %s; pml %s, btl %s; %s" % (
        launched, result.get("world_size", "?"), _join_hosts(result.get("hosts") or []) or "?",
        (result.get("mpi_library") or "MPI library unknown").split(",")[0],
        result.get("pml") or "not reported", ",".join(result.get("btl_used") or []) or "not reported",
        _allreduce_words(allreduce))
    detail = {"where": where, "ranks": placement["ranks"], "hosts": result.get("hosts") or [],
              "world_size": result.get("world_size"), "mpi_library": result.get("mpi_library"),
              "pml": result.get("pml"), "btl": result.get("btl"), "btl_used": result.get("btl_used"),
              "allreduce": allreduce, "problems": problems}
    if problems:
        return {"status": "failed", "reason": "; ".join(problems) + " [" + what + "]", "detail": detail}
    return {"status": "passed", "reason": what, "detail": detail}
