# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Verdicts that compare the nodes of a fleet with each other: what each node runs (fleet consistency) and how
fast each node and link moves data relative to the others (bandwidth). No Ansible import here.

A fleet trains at the speed of its slowest node, and a node that runs another driver branch, another image or
other NCCL/UCX settings than the rest fails in ways a check of the node alone cannot see. Both verdicts name the
node (and for a link, its peer), the value found and what the rest of the fleet has.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import statistics

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.validate_runs import (
    FABRIC_PREFIXES, _join_hosts, ddp_verdict, env_file_text, parse_env_file)

# What must be the same on every node (port rate: on every node with the same GPU model); the rest of a node's
# profile is listed where it differs.
MUST_MATCH = ("driver_branch", "image_digest", "fabric", "port_rate_gbps")
PROFILE_KEYS = ("driver_branch", "driver_version", "kernel", "os", "gpu_model", "gpu_count", "image_digest",
                "image_torch", "image_cuda", "image_nccl", "image_mpi", "host_mpi", "host_ucx", "host_nccl",
                "host_cuda", "hca_firmware", "port_rate_gbps")
# Host packages the profile reads versions from (the first one installed), Debian/Ubuntu names before RHEL ones.
# The host's Open MPI is the library the host MPI check ran with (host_mpi).
HOST_PACKAGES = {
    "host_ucx": ("ucx-utils", "libucx0", "ucx"),
    "host_nccl": ("libnccl2", "libnccl"),
    "host_cuda": ("cuda-toolkit", "nvidia-cuda-toolkit", "libcudart12", "cuda-cudart-12"),
}
GROUPED_BY_GPU_MODEL = ("port_rate_gbps",)
# Fabric settings that name the node's own devices (interfaces, HCAs): where they differ, nodes name their devices
# differently; listed, not failed.
FABRIC_NODE_DEVICES = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_TOPO_FILE")
UNSET = "(unset)"
DEFAULT_FRACTION = 0.8


def _step(steps, name):
    return next((step for step in steps or [] if step.get("step") == name), None)


def _detail(steps, name):
    step = _step(steps, name)
    return (step or {}).get("detail") or {}


def _joined(values):
    values = sorted(set(str(value) for value in values if value not in (None, "")))
    return ", ".join(values) or None


def _package_version(packages, names):
    """The version of the first of ``names`` installed, from a package_facts-shaped dict ({name: [{version}]})."""
    for name in names:
        entries = (packages or {}).get(name) or []
        if entries:
            return entries[0].get("version") or None
    return None


def node_profile(steps, *, node, topology=None, facts=None, fabric_env=None, packages=None):
    """What this node runs, for fleet_consistency: its step results (validate_results), its gpu_topology fact,
    its gpufleet_node fact, its fabric env file (text or slurp result; None: the node has none) and its installed
    packages (preflight's list, package_facts-shaped; None: not read), for the host's UCX, NCCL and CUDA.

    A value that could not be read is None and is not compared.
    """
    topology, facts = topology or {}, facts or {}
    driver = topology.get("driver_version") or None
    ddp = _detail(steps, "ddp_local")
    launcher = _step(steps, "launcher") or {}
    ports = [port for port in _detail(steps, "fabric").get("ports") or [] if port.get("state") == "ACTIVE"]
    env_text = env_file_text(fabric_env)
    gpus = topology.get("gpus") or []
    profile = {
        "node": node,
        "driver_version": driver,
        "driver_branch": driver.split(".", maxsplit=1)[0] if driver else None,
        "kernel": facts.get("kernel"),
        "os": (facts.get("os") or {}).get("pretty_name"),
        "gpu_model": _joined(gpu.get("name") for gpu in gpus) or ("none" if topology else None),
        "gpu_count": int(topology.get("gpu_count", facts.get("gpu_count") or 0) or 0),
        "image_digest": ((launcher.get("detail") or {}).get("runs") or None) if launcher.get("status") == "passed"
        else None,
        "image_torch": ddp.get("torch"),
        "image_cuda": ddp.get("cuda_version"),
        "image_nccl": ddp.get("nccl_version"),
        "image_mpi": _library(_detail(steps, "mpi_image").get("mpi_library")),
        "host_mpi": _library(_detail(steps, "mpi").get("mpi_library")),
        "hca_firmware": _joined(port.get("firmware") for port in ports),
        "port_rate_gbps": _joined("%g" % port["rate_gbps"] for port in ports if port.get("rate_gbps") is not None),
        "fabric": None,
    }
    for key, names in HOST_PACKAGES.items():
        profile[key] = _package_version(packages, names)
    if env_text is not None:
        profile["fabric"] = dict((key, value) for key, value in parse_env_file(env_text).items()
                                 if key.startswith(FABRIC_PREFIXES))
    return profile


def _library(text):
    """"Open MPI v5.0.7, package: ..." -> "Open MPI v5.0.7"."""
    return (text or "").split(",", maxsplit=1)[0].strip() or None


def _items(profile, fabric_keys):
    """(name, value) of every compared item of a profile: its PROFILE_KEYS, then one "fabric KEY" per fabric key
    any node sets (UNSET where this node's fabric env lacks it)."""
    items = [(key, profile.get(key)) for key in PROFILE_KEYS]
    fabric = profile.get("fabric")
    for key in fabric_keys:
        items.append(("fabric " + key, None if fabric is None else fabric.get(key, UNSET)))
    return items


def _hosts_words(hosts):
    return _join_hosts(sorted(hosts), limit=6)


def _compare(name, holders, must_match):
    """One item across the nodes: holders {node: value} (nodes that have a value). Returns (failing {node: why},
    difference line or None)."""
    by_value = {}
    for host, value in holders.items():
        by_value.setdefault(str(value), []).append(host)
    if len(by_value) < 2:
        return {}, None
    spread = "; ".join("%s on %s" % (value, _hosts_words(hosts))
                       for value, hosts in sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    line = "%s: %s" % (name, spread)
    if not must_match:
        return {}, line
    total = len(holders)
    majority = [value for value, hosts in by_value.items() if 2 * len(hosts) > total]
    failing = {}
    if majority:
        usual = majority[0]
        for value, hosts in by_value.items():
            if value == usual:
                continue
            for host in hosts:
                failing[host] = "%s: %s here, %s on %d of %d nodes (%s)" % (
                    name, value, usual, len(by_value[usual]), total, _hosts_words(by_value[usual]))
    else:
        for host in holders:
            failing[host] = "%s differs with no majority: %s" % (name, spread)
    return failing, line


def fleet_consistency(profiles, *, me, must_match=MUST_MATCH, enabled=True):
    """Verdict of the consistency step for node ``me``, from every validated node's node_profile.

    Items of must_match (``fabric`` stands for each NCCL_*/UCX_* setting of the fabric env file but those that name
    the node's own devices, FABRIC_NODE_DEVICES) must hold one value on every node that has one; port_rate_gbps among
    the nodes of the same GPU model. A node whose value differs from the value of a strict majority of the nodes
    fails, named with both values; with no strict majority (two nodes, or a tie) every node that differs fails.
    Other differences are listed, not failed.
    """
    if not enabled:
        return {"status": "skipped", "reason": "check off", "detail": {}}
    profiles = [profile for profile in profiles or [] if profile]
    if len(profiles) < 2:
        return {"status": "skipped", "reason": "only this node was validated: nothing to compare it with",
                "detail": {"nodes": len(profiles)}}
    unknown = sorted(set(must_match) - set(MUST_MATCH))
    if unknown:
        return {"status": "failed", "reason": "validate_consistency_must_match names unknown items: %s (known: %s)"
                % (", ".join(unknown), ", ".join(MUST_MATCH)), "detail": {}}
    fabric_keys = sorted(set(key for profile in profiles for key in (profile.get("fabric") or {})))
    table = dict((profile["node"], dict(_items(profile, fabric_keys))) for profile in profiles)
    names = [name for name, _value in _items({}, fabric_keys)]
    problems, mismatches, differences, compared = [], [], [], []
    for name in names:
        strict = name.split(" ", 1)[0] in must_match and name.split(" ", 1)[-1] not in FABRIC_NODE_DEVICES
        groups = {}
        for profile in profiles:
            group = profile.get("gpu_model") if name in GROUPED_BY_GPU_MODEL else None
            value = table[profile["node"]][name]
            if value is not None:
                groups.setdefault(group, {})[profile["node"]] = value
        for group, holders in sorted(groups.items(), key=lambda kv: str(kv[0])):
            label = "%s (%s nodes)" % (name, group) if group is not None and len(groups) > 1 else name
            if len(holders) > 1:
                compared.append(label)
            failing, line = _compare(label, holders, strict)
            if me in failing:
                problems.append(failing[me])
            if line and failing:
                mismatches.append("%s (fails %s)" % (line, _hosts_words(failing)))
            elif line:
                differences.append(line)
    detail = {"nodes": len(profiles), "compared": compared, "mismatches": mismatches, "differences": differences,
              "must_match": list(must_match), "problems": problems, "profile": table.get(me)}
    what = "%d nodes compared on %d item(s)" % (len(profiles), len(compared))
    if mismatches and not problems:
        what += "; must match, differs on other nodes: " + " | ".join(mismatches)
    what += "; differences allowed: " + " | ".join(differences) if differences else "; no other differences"
    if problems:
        return {"status": "failed", "reason": "; ".join(problems) + " [" + what + "]", "detail": detail}
    return {"status": "passed", "reason": what, "detail": detail}


def pair_rounds(hosts):
    """The node pairs of a ring over ``hosts`` (each node with the next, the last with the first), grouped into
    rounds in which no node is in two pairs: two rounds for an even count, three for an odd one, one pair for two
    nodes. Every node is in two pairs (one for two nodes), so n pair runs cover every node twice."""
    hosts = list(hosts or [])
    count = len(hosts)
    if count < 2:
        return []
    if count == 2:
        return [[[hosts[0], hosts[1]]]]
    edges = [(index, (index + 1) % count) for index in range(count)]
    rounds = [[edge for edge in edges if edge[0] % 2 == 0 and edge[1] != 0],
              [edge for edge in edges if edge[0] % 2 == 1 and edge[1] != 0],
              [edge for edge in edges if edge[1] == 0]]
    if count % 2 == 0:
        rounds = [rounds[0], rounds[1] + rounds[2]]
    return [[[hosts[a], hosts[b]] for a, b in pairs] for pairs in rounds if pairs]


def pair_plan(hosts, *, me):
    """This node's pair runs, in round order: [{round, pair, peer, rank}] (rank: its node rank in the pair; the
    pair's first node hosts the rendezvous)."""
    plan = []
    for number, pairs in enumerate(pair_rounds(hosts), start=1):
        for pair in pairs:
            if me in pair:
                plan.append({"round": number, "pair": pair, "peer": pair[1 - pair.index(me)],
                             "rank": pair.index(me)})
    return plan


def pair_runs(loop_result, *, backend="gloo", min_busbw_gbps=0.0, active_rdma_ports=0, fabric_env=None,
              nccl_env=None):
    """One row per pair run of this node ({peer, round, status, busbw_gbps, reason}), from the registered result of
    the task that looped over pair_plan (each result's ``item`` is a plan entry); each run is judged as the DDP
    check across nodes is (ddp_verdict). Skipped items are left out."""
    rows = []
    for result in (loop_result or {}).get("results") or []:
        if result.get("skipped"):
            continue  # a pair that did not run (the step off, or fewer than three nodes): no figure, no verdict
        item = result.get("item") or {}
        verdict = ddp_verdict(result, backend=backend, scope="fleet", expect_nnodes=2,
                              min_busbw_gbps=min_busbw_gbps, active_rdma_ports=active_rdma_ports,
                              fabric_env=fabric_env, nccl_env=nccl_env)
        rows.append({"peer": item.get("peer"), "round": item.get("round"), "status": verdict["status"],
                     "busbw_gbps": verdict["detail"].get("busbw_gbps"), "reason": verdict["reason"]})
    return rows


def _gbps(value):
    return "%.3g GB/s" % value


def bandwidth_verdict(figures, *, me, fraction=DEFAULT_FRACTION, enabled=True, skip_reason=""):
    """Verdict of the bandwidth step for node ``me``: the node and its links measured against the rest of the fleet.

    figures: one entry per node of the runs, {node, local_busbw_gbps (the node-alone DDP run's busbw, None when it
    measured none), pairs: pair_runs rows}. With no floor configured, a node still fails when
    - alone it moves less than ``fraction`` of the fleet median of the nodes alone;
    - every pair it was in is slower than ``fraction`` of the reference, the median over the nodes of each node's
      best pair (the node is the slow one: its peers' other pairs are fast);
    - one of its pairs is that slow while neither node of the pair is slow in all its pairs (the link between them);
    - a pair run failed (named by peer).
    With two nodes there is one pair and nothing to compare it with; that is said, not passed over.
    """
    if not skip_reason and not enabled:
        skip_reason = "check off"
    if skip_reason:
        return {"status": "skipped", "reason": skip_reason, "detail": {}}
    fraction = float(fraction)
    if not 0 < fraction <= 1:
        return {"status": "failed", "reason": "validate_bandwidth_fraction must lie in (0, 1], not %s" % fraction,
                "detail": {}}
    figures = dict((entry["node"], entry) for entry in figures or [] if entry and entry.get("node"))
    mine = figures.get(me) or {"pairs": []}
    local = dict((node, entry["local_busbw_gbps"]) for node, entry in figures.items()
                 if entry.get("local_busbw_gbps") is not None)
    edges = {}
    for node, entry in figures.items():
        for row in entry.get("pairs") or []:
            if row.get("busbw_gbps") is not None:
                key = tuple(sorted((node, row["peer"])))
                edges[key] = min(edges.get(key, row["busbw_gbps"]), row["busbw_gbps"])
    best = {}
    for (first, second), value in edges.items():
        for node in (first, second):
            best[node] = max(best.get(node, value), value)
    problems, notes = [], []
    local_median = statistics.median(local.values()) if len(local) > 1 else None
    if local_median is not None and me in local and local[me] < fraction * local_median:
        problems.append("alone %s, below %g of the fleet median %s (%d nodes)"
                        % (_gbps(local[me]), fraction, _gbps(local_median), len(local)))
    reference = statistics.median(best.values()) if len(best) > 2 else None
    slow_nodes = set(node for node, value in best.items()
                     if reference is not None and value < fraction * reference)
    my_pairs = sorted(mine.get("pairs") or [], key=lambda row: row.get("round") or 0)
    for row in my_pairs:
        if row.get("status") != "passed":
            problems.append("pair run with %s failed: %s" % (row.get("peer"), row.get("reason")))
    if me in slow_nodes:
        problems.append("every pair of %s is slow: %s; the fleet's reference is %s (median of each node's best "
                        "pair), the floor %g of it" % (me, ", ".join(
                            "with %s %s" % (row["peer"], _gbps(row["busbw_gbps"])) for row in my_pairs
                            if row.get("busbw_gbps") is not None), _gbps(reference), fraction))
    elif reference is not None:
        for row in my_pairs:
            value = edges.get(tuple(sorted((me, row.get("peer")))))
            if value is None or value >= fraction * reference:
                continue
            if row["peer"] in slow_nodes:
                notes.append("the pair with %s is slow (%s) because %s is" % (row["peer"], _gbps(value), row["peer"]))
            else:
                problems.append("the link %s-%s is slow: %s, below %g of the fleet's reference %s"
                                % (me, row["peer"], _gbps(value), fraction, _gbps(reference)))
    if reference is None and edges:
        notes.append("%d pair(s) of %d nodes: too few to tell a slow node from a slow peer" % (len(edges), len(best)))
    elif not edges:
        notes.append("no pair runs: fewer than three nodes (the run across the nodes is their one pair)")
    rounds = max([row.get("round") or 0 for entry in figures.values() for row in entry.get("pairs") or []] or [0])
    detail = {"local_busbw_gbps": local.get(me), "local_median_gbps": local_median,
              "pairs": [dict((k, row.get(k)) for k in ("peer", "round", "status", "busbw_gbps")) for row in my_pairs],
              "reference_gbps": reference, "fraction": fraction, "slow_nodes": sorted(slow_nodes),
              "runs": {"node_alone": len(local), "pairs": len(edges), "pair_rounds": rounds}, "notes": notes,
              "problems": problems}
    what = "alone %s (fleet median %s); pairs: %s; reference %s; %d node-alone run(s), %d pair run(s) in %d " \
        "round(s)" % (_gbps(local[me]) if me in local else "not measured",
                      _gbps(local_median) if local_median is not None else "n/a",
                      ", ".join("%s %s" % (row.get("peer"), _gbps(row["busbw_gbps"]) if row.get("busbw_gbps")
                                           is not None else row.get("status")) for row in my_pairs) or "none",
                      _gbps(reference) if reference is not None else "n/a", len(local), len(edges), rounds)
    if notes:
        what += "; " + "; ".join(notes)
    if problems:
        return {"status": "failed", "reason": "; ".join(problems) + " [" + what + "]", "detail": detail}
    return {"status": "passed", "reason": what, "detail": detail}
