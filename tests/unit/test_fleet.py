"""Fleet comparisons of the validate role: the pair plan, the bandwidth verdict and fleet consistency."""
import base64

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet


def nodes(count):
    return ["node%d" % index for index in range(1, count + 1)]


@pytest.mark.parametrize("count", range(2, 12))
def test_the_pair_rounds_cover_a_ring_in_n_runs_and_no_node_twice_a_round(count):
    hosts = nodes(count)
    rounds = fleet.pair_rounds(hosts)
    pairs = [tuple(sorted(pair)) for one in rounds for pair in one]
    ring = set(tuple(sorted((hosts[i], hosts[(i + 1) % count]))) for i in range(count))
    assert sorted(set(pairs)) == sorted(ring)
    assert len(pairs) == len(ring)  # n pair runs (one for two nodes), not n^2
    assert len(rounds) == (1 if count == 2 else 2 if count % 2 == 0 else 3)
    for one in rounds:
        seen = [host for pair in one for host in pair]
        assert len(seen) == len(set(seen))
    for host in hosts:
        assert sum(host in pair for pair in pairs) == (1 if count == 2 else 2)


def test_the_pair_plan_of_a_node_is_in_round_order_with_its_rank():
    plan = fleet.pair_plan(nodes(5), me="node1")
    assert [(entry["round"], entry["peer"], entry["rank"]) for entry in plan] == [(1, "node2", 0), (3, "node5", 1)]
    assert fleet.pair_plan(["node1"], me="node1") == []


def run(busbw, rc=0, problem=None):
    line = ('GPUFLEET_DDP_RESULT {"backend": "gloo", "world_size": 4, "nnodes": 2, "hosts": ["a", "b"], '
            '"busbw_gbps": %s, "problems": %s, "fabric": {"env": {}}}' % (busbw, '["%s"]' % problem if problem else "[]"))
    return {"rc": rc, "stdout": line, "stderr": ""}


def figures(local, pairs):
    """local: {node: busbw}; pairs: {(a, b): busbw} as both nodes of the pair report it."""
    out = []
    for node, value in local.items():
        rows = []
        for (first, second), busbw in pairs.items():
            if node in (first, second):
                rows.append({"peer": second if node == first else first, "round": 1, "status": "passed",
                             "busbw_gbps": busbw, "reason": ""})
        out.append({"node": node, "local_busbw_gbps": value, "pairs": rows})
    return out


def test_pair_runs_reads_each_loop_result_as_a_two_node_ddp_run():
    rows = fleet.pair_runs({"results": [
        dict(run(1.5), item={"peer": "node2", "round": 1}),
        dict(run(0.5, rc=1, problem="bus bandwidth 0.50 GB/s is below the required 1.00 GB/s"),
             item={"peer": "node3", "round": 3})]}, min_busbw_gbps=1.0)
    assert [(row["peer"], row["round"], row["status"], row["busbw_gbps"]) for row in rows] == [
        ("node2", 1, "passed", 1.5), ("node3", 3, "failed", 0.5)]
    assert "below the required 1.00 GB/s" in rows[1]["reason"]
    assert fleet.pair_runs({"skipped": True}) == []
    # The loop's items skipped by its condition (two nodes, the step off) are no runs, not failed ones.
    assert fleet.pair_runs({"results": [{"skipped": True, "item": {"peer": "node2", "round": 1}}]}) == []


SLOW_NODE3 = figures({"node1": 2.0, "node2": 2.1, "node3": 1.9, "node4": 2.0},
                     {("node1", "node2"): 1.2, ("node2", "node3"): 0.01, ("node3", "node4"): 0.012,
                      ("node4", "node1"): 1.1})


def test_a_slow_node_fails_alone_named_with_its_pairs_and_the_fleet_reference():
    verdicts = dict((node, fleet.bandwidth_verdict(SLOW_NODE3, me=node)) for node in nodes(4))
    assert [node for node, v in verdicts.items() if v["status"] == "failed"] == ["node3"]
    reason = verdicts["node3"]["reason"]
    assert "every pair of node3 is slow" in reason
    assert "with node2 0.01 GB/s" in reason and "with node4 0.012 GB/s" in reason
    assert "reference is 1.15 GB/s" in reason
    assert "4 node-alone run(s), 4 pair run(s)" in reason
    assert "because node3 is" in verdicts["node2"]["reason"]
    assert verdicts["node3"]["detail"]["slow_nodes"] == ["node3"]


def test_a_slow_link_fails_both_of_its_nodes_and_no_other():
    data = figures({"node1": 2.0, "node2": 2.0, "node3": 2.0, "node4": 2.0},
                   {("node1", "node2"): 1.2, ("node2", "node3"): 0.05, ("node3", "node4"): 1.2,
                    ("node4", "node1"): 1.1})
    failed = [node for node in nodes(4) if fleet.bandwidth_verdict(data, me=node)["status"] == "failed"]
    assert failed == ["node2", "node3"]
    assert "the link node2-node3 is slow: 0.05 GB/s" in fleet.bandwidth_verdict(data, me="node2")["reason"]


def test_a_node_slow_alone_fails_against_the_median_of_the_nodes_alone():
    data = figures({"node1": 2.0, "node2": 0.4, "node3": 2.2}, {})
    verdict = fleet.bandwidth_verdict(data, me="node2")
    assert verdict["status"] == "failed"
    assert "alone 0.4 GB/s, below 0.8 of the fleet median 2 GB/s (3 nodes)" in verdict["reason"]
    assert fleet.bandwidth_verdict(data, me="node1")["status"] == "passed"
    # A looser fraction lets it pass.
    assert fleet.bandwidth_verdict(data, me="node2", fraction=0.1)["status"] == "passed"


def test_a_fleet_within_the_fraction_passes_and_says_what_it_measured():
    data = figures({"node1": 2.0, "node2": 1.8, "node3": 2.1},
                   {("node1", "node2"): 1.0, ("node2", "node3"): 0.9, ("node3", "node1"): 0.95})
    for node in nodes(3):
        verdict = fleet.bandwidth_verdict(data, me=node)
        assert verdict["status"] == "passed", verdict
        assert "3 pair run(s)" in verdict["reason"]


def test_two_nodes_say_that_one_pair_cannot_name_the_slow_one():
    data = figures({"node1": 2.0, "node2": 2.0}, {("node1", "node2"): 0.01})
    verdict = fleet.bandwidth_verdict(data, me="node1")
    assert verdict["status"] == "passed"
    assert "too few to tell a slow node from a slow peer" in verdict["reason"]


def test_a_failed_pair_run_fails_the_node_naming_the_peer():
    data = figures({"node1": 2.0, "node2": 2.0, "node3": 2.0},
                   {("node1", "node2"): 1.0, ("node2", "node3"): 1.0, ("node3", "node1"): 1.0})
    data[0]["pairs"][0].update(status="failed", busbw_gbps=None, reason="rendezvous timed out")
    verdict = fleet.bandwidth_verdict(data, me="node1")
    assert verdict["status"] == "failed"
    assert "pair run with node2 failed: rendezvous timed out" in verdict["reason"]


def test_bandwidth_skips_and_refuses_a_bad_fraction():
    assert fleet.bandwidth_verdict([], me="node1", enabled=False)["reason"] == "check off"
    assert fleet.bandwidth_verdict([], me="node1", skip_reason="no image")["status"] == "skipped"
    assert fleet.bandwidth_verdict([], me="node1", fraction=1.5)["status"] == "failed"


def profile(node, **values):
    base = {"node": node, "driver_branch": "550", "driver_version": "550.163.01", "kernel": "6.1.0-28-amd64",
            "os": "Debian 12", "gpu_model": "NVIDIA H100", "gpu_count": 8, "image_digest": "reg/img@sha256:aa",
            "image_torch": "2.6.0", "image_nccl": "2.22.3", "image_mpi": "Open MPI v5.0.7", "host_mpi": None,
            "hca_firmware": "28.41.1000", "port_rate_gbps": "400", "fabric": {"NCCL_IB_HCA": "mlx5"}}
    base.update(values)
    return base


def test_the_odd_node_fails_by_name_and_the_others_pass():
    profiles = [profile("node1"), profile("node2", fabric={"NCCL_IB_HCA": "mlx5", "NCCL_ALGO": "Ring"}),
                profile("node3")]
    verdicts = dict((p["node"], fleet.fleet_consistency(profiles, me=p["node"])) for p in profiles)
    assert verdicts["node2"]["status"] == "failed"
    assert ("fabric NCCL_ALGO: Ring here, (unset) on 2 of 3 nodes (node1, node3)"
            in verdicts["node2"]["reason"])
    assert verdicts["node1"]["status"] == "passed" and verdicts["node3"]["status"] == "passed"


def test_an_image_digest_the_others_do_not_run_fails_that_node():
    profiles = [profile("node1"), profile("node2"), profile("node3", image_digest="reg/img@sha256:bb")]
    verdict = fleet.fleet_consistency(profiles, me="node3")
    assert verdict["status"] == "failed"
    assert "image_digest: reg/img@sha256:bb here, reg/img@sha256:aa on 2 of 3 nodes" in verdict["reason"]


def test_other_differences_are_listed_not_failed():
    profiles = [profile("node1"), profile("node2", kernel="6.1.0-30-amd64"), profile("node3")]
    verdict = fleet.fleet_consistency(profiles, me="node2")
    assert verdict["status"] == "passed"
    assert "differences allowed: kernel: 6.1.0-28-amd64 on node1, node3; 6.1.0-30-amd64 on node2" in verdict["reason"]


def test_a_tie_fails_every_node_in_the_disagreement():
    profiles = [profile("node1"), profile("node2", driver_branch="535")]
    for node in ("node1", "node2"):
        verdict = fleet.fleet_consistency(profiles, me=node)
        assert verdict["status"] == "failed"
        assert "driver_branch differs with no majority" in verdict["reason"]


def test_port_rate_is_compared_within_a_gpu_model():
    profiles = [profile("node1"), profile("node2"), profile("node3", gpu_model="NVIDIA L40S", port_rate_gbps="200"),
                profile("node4", gpu_model="NVIDIA L40S", port_rate_gbps="200")]
    assert all(fleet.fleet_consistency(profiles, me=p["node"])["status"] == "passed" for p in profiles)
    profiles[1]["port_rate_gbps"] = "200"
    assert fleet.fleet_consistency(profiles, me="node2")["status"] == "failed"


def test_unknown_values_are_not_compared_and_one_node_is_skipped():
    profiles = [profile("node1"), profile("node2", image_digest=None, fabric=None)]
    assert fleet.fleet_consistency(profiles, me="node2")["status"] == "passed"
    assert fleet.fleet_consistency(profiles[:1], me="node1")["status"] == "skipped"
    assert fleet.fleet_consistency(profiles, me="node1", enabled=False)["status"] == "skipped"
    assert fleet.fleet_consistency(profiles, me="node1", must_match=["kernel"])["status"] == "failed"


def test_node_profile_reads_the_steps_facts_and_fabric_env():
    steps = [
        {"step": "fabric", "status": "passed", "detail": {"ports": [
            {"state": "ACTIVE", "rate_gbps": 400.0, "firmware": "28.41.1000"},
            {"state": "DOWN", "rate_gbps": 100.0, "firmware": "28.41.1000"}]}},
        {"step": "launcher", "status": "passed", "detail": {"runs": "reg/img@sha256:aa"}},
        {"step": "ddp_local", "status": "passed", "detail": {"torch": "2.6.0", "nccl_version": "2.22.3"}},
        {"step": "mpi_image", "status": "passed", "detail": {"mpi_library": "Open MPI v5.0.7, package: Debian"}},
    ]
    env = {"content": base64.b64encode(b"# fabric\nNCCL_IB_HCA=mlx5\nUCX_TLS=rc\nOMP_NUM_THREADS=4\n").decode()}
    got = fleet.node_profile(steps, node="node1", topology={"driver_version": "550.163.01", "gpu_count": 2, "gpus": [
        {"name": "NVIDIA H100"}, {"name": "NVIDIA H100"}]}, facts={"kernel": "6.1.0", "os": {"pretty_name": "D"}},
        fabric_env=env)
    assert got["driver_branch"] == "550" and got["gpu_model"] == "NVIDIA H100" and got["gpu_count"] == 2
    assert got["image_digest"] == "reg/img@sha256:aa" and got["image_mpi"] == "Open MPI v5.0.7"
    assert got["port_rate_gbps"] == "400" and got["hca_firmware"] == "28.41.1000"
    assert got["fabric"] == {"NCCL_IB_HCA": "mlx5", "UCX_TLS": "rc"}
    packages = {"libucx0": [{"version": "1.18.1+ds-1"}], "libnccl2": [{"version": "2.22.3-1"}]}
    with_host = fleet.node_profile(steps + [{"step": "ddp_local", "status": "passed", "detail": {
        "torch": "2.6.0", "cuda_version": "12.4"}}], node="node1", packages=packages)
    assert (with_host["host_ucx"], with_host["host_nccl"], with_host["host_cuda"]) == ("1.18.1+ds-1", "2.22.3-1", None)
    assert with_host["image_cuda"] is None  # the first ddp_local step of the results is the one read
    in_image = fleet.node_profile([{"step": "ddp_local", "detail": {"cuda_version": "12.4"}}], node="n")
    assert in_image["image_cuda"] == "12.4"
    bare = fleet.node_profile([], node="node2", fabric_env={"skipped": True})
    assert bare["fabric"] is None and bare["image_digest"] is None and bare["driver_branch"] is None
    assert bare["host_ucx"] is None and bare["image_cuda"] is None


def test_fabric_settings_naming_the_nodes_devices_are_listed_not_failed():
    profiles = [profile("node1", fabric={"NCCL_SOCKET_IFNAME": "=ens1f0"}),
                profile("node2", fabric={"NCCL_SOCKET_IFNAME": "=ens2f0"}), profile("node3", fabric={})]
    verdict = fleet.fleet_consistency(profiles, me="node2")
    assert verdict["status"] == "passed"
    assert "fabric NCCL_SOCKET_IFNAME" in verdict["reason"]


def test_the_nodes_that_pass_name_the_mismatch_and_the_node_it_fails():
    profiles = [profile("node1"), profile("node2", image_digest="reg/img@sha256:bb"), profile("node3")]
    verdict = fleet.fleet_consistency(profiles, me="node1")
    assert verdict["status"] == "passed"
    assert ("must match, differs on other nodes: image_digest: reg/img@sha256:aa on node1, node3; "
            "reg/img@sha256:bb on node2 (fails node2)") in verdict["reason"]
    assert verdict["detail"]["differences"] == []
