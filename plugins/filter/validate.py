# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the validate role uses to read the output of its checks."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


import json
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.cluster import node_address

DDP_PREFIX = "GPUFLEET_DDP_RESULT "
RANK_RE = re.compile(r"^GPUFLEET_RANK\s+(\d+)\s+(\S+)\s*$")


def ddp_result(stdout):
    """The last GPUFLEET_DDP_RESULT JSON object in stdout, or {}."""
    found = {}
    for line in (stdout or "").splitlines():
        line = line.strip()
        if line.startswith(DDP_PREFIX):
            try:
                found = json.loads(line[len(DDP_PREFIX):])
            except ValueError:
                continue
    return found


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


def mpi_rank_check(stdout, entries, hostvars, hosts):
    """Check that rank i ran on the node of entries[i] (the --host list mpirun was given, in order).

    Returns {"ranks": [{rank, host, expected, inventory_host, ok}], "problems": [...]}.
    """
    by_address = _by_address(hostvars, hosts)
    seen = {}
    for line in (stdout or "").splitlines():
        match = RANK_RE.match(line.strip())
        if match:
            seen[int(match.group(1))] = match.group(2)
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


class FilterModule(object):
    def filters(self):
        return {
            "ddp_result": ddp_result,
            "mpi_hostfile_hosts": mpi_hostfile_hosts,
            "mpi_hosts_for": mpi_hosts_for,
            "mpi_rank_check": mpi_rank_check,
        }
