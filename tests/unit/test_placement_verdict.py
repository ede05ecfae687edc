"""validate's placement step: placement_verdict (plugin_utils/validate_runs) on what the DDP check's ranks and this
node's in-image MPI rank report.

The records are in the shape gpufleet_ddp_check.placement_record and gpufleet_mpi_check.placement_record give
(test_ddp_check.py runs the DDP check through the binder and reads them back, test_mpi_check.py the MPI check's); the
maps in the shape placement_facts writes.
"""
import json

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.validate_runs import DDP_PREFIX, placement_verdict

EIGHT = {"numa_nodes": [{"node": 0, "cpus": "0-47"}, {"node": 1, "cpus": "48-95"}],
         "gpus": [{"index": i, "uuid": "GPU-%d" % i, "numa_node": 0 if i < 4 else 1,
                   "cpus": "0-47" if i < 4 else "48-95"} for i in range(8)]}
CPU_ONLY = {"numa_nodes": [{"node": 0, "cpus": "0-1"}], "gpus": []}


def record(rank, cpus, plan=None, uuid=None, slot=None, skip=None):
    return {"rank": rank, "local_rank": rank, "host": "node1", "gpu_uuid": uuid, "cpus": cpus,
            "plan_cpus": cpus if plan is None else plan, "plan_slot": slot, "plan_numa": None, "plan_skip": skip}


def run(records, rc=0):
    return {"rc": rc, "stdout": "noise\n%s%s\n" % (DDP_PREFIX, json.dumps({"passed": True, "placement": records})),
            "stderr": ""}


def test_ranks_on_their_gpus_cpus_pass_naming_each():
    ranks = [record(0, "0-11", uuid="GPU-0", slot="GPU 0"), record(1, "48-59", uuid="GPU-4", slot="GPU 4")]
    verdict = placement_verdict(run(ranks), placement=EIGHT)
    assert verdict["status"] == "passed", verdict
    assert verdict["reason"] == ("2 rank(s), each rank on its GPU's CPUs and on the binder's plan: "
                                 "DDP rank 0 GPU 0 CPUs 0-11, DDP rank 1 GPU 4 CPUs 48-59; "
                                 "not run: the in-image MPI check")


def test_a_rank_outside_its_gpus_numa_node_fails_naming_rank_gpu_and_cpus():
    ranks = [record(0, "0-11", uuid="GPU-0"), record(1, "0-11,48", uuid="GPU-4")]
    verdict = placement_verdict(run(ranks), placement=EIGHT)
    assert verdict["status"] == "failed"
    assert verdict["reason"] == "DDP rank 1 on GPU 4: CPUs 0-11,48 lie outside GPU 4's NUMA node 1 (CPUs 48-95)"


@pytest.mark.parametrize("ranks, words", [
    ([record(0, "0-1", plan="0")], "rank 0: runs on CPUs 0-1, the binder's plan gave 0"),
    ([record(0, "0-1", skip="no placement map at /etc/gpufleet/placement.json")],
     "rank 0: the binder bound nothing: no placement map at"),
    ([dict(record(0, "0-1"), plan_cpus=None)], "rank 0: no binder ran"),
    ([{"rank": 0, "unreadable": "{\"cpus"}], "rank 0: its placement record is unreadable"),
])
def test_an_unbound_or_rebound_rank_fails(ranks, words):
    verdict = placement_verdict(run(ranks), placement=CPU_ONLY)
    assert verdict["status"] == "failed" and words in verdict["reason"]


def test_without_a_uuid_the_plans_gpu_is_checked():
    ranks = [record(0, "48-59", slot="GPU 4"), record(1, "0-11", slot="GPU 5")]
    verdict = placement_verdict(run(ranks), placement=EIGHT)
    assert verdict["reason"] == "DDP rank 1 on GPU 5: CPUs 0-11 lie outside GPU 5's NUMA node 1 (CPUs 48-95)"


def test_a_gpu_the_map_does_not_list_fails():
    verdict = placement_verdict(run([record(0, "0-11", uuid="GPU-99")]), placement=EIGHT)
    assert verdict["reason"] == "DDP rank 0: its GPU GPU-99 is not in the placement map"


def test_without_gpus_the_plan_is_checked_and_the_reason_says_so():
    ranks = [record(0, "0", slot="NUMA node 0"), record(1, "1", slot="NUMA node 0")]
    verdict = placement_verdict(run(ranks), placement=CPU_ONLY)
    assert verdict["status"] == "passed"
    assert "no GPU in the map: each rank on the CPUs the binder's plan gave it" in verdict["reason"]
    assert verdict["reason"].endswith("DDP rank 0 NUMA node 0 CPUs 0, DDP rank 1 NUMA node 0 CPUs 1; "
                                      "not run: the in-image MPI check")


@pytest.mark.parametrize("given, status, words", [
    ({"run": {"skipped": True}}, "skipped", "not run"),
    ({"run": {"skipped": True}, "mpi": {"status": "skipped", "detail": {}}}, "skipped", "not run"),
    ({"run": run([]), "enabled": False}, "skipped", "check off"),
    ({"run": run([]), "skip_reason": "no verified image"}, "skipped", "no verified image"),
    ({"run": run([record(0, "0")]), "placement": None}, "failed", "no placement map on the node"),
    ({"run": {"rc": 1, "stdout": "", "stderr": ""}}, "failed", "reported no rank placement (no result)"),
    ({"run": run(None)}, "failed", "reported no rank placement (an image or check without it)"),
])
def test_skips_and_missing_inputs(given, status, words):
    given = dict(given)
    verdict = placement_verdict(given.pop("run"), **dict({"placement": CPU_ONLY}, **given))
    assert verdict["status"] == status and words in verdict["reason"]


def mpi(record_=None, status="passed"):
    """The mpi_image step's verdict as record.yml keeps it, with this node's rank's placement record."""
    return {"step": "mpi_image", "status": status,
            "detail": {} if record_ is None else {"placement": dict(record_, rank=2)}}


def test_the_mpi_rank_is_checked_with_the_ddp_ranks():
    ranks = [record(0, "0-11", uuid="GPU-0", slot="GPU 0")]
    verdict = placement_verdict(run(ranks), placement=EIGHT, mpi=mpi(record(0, "0-11", slot="GPU 0")))
    assert verdict["status"] == "passed", verdict
    assert verdict["reason"] == ("2 rank(s), each rank on its GPU's CPUs and on the binder's plan: "
                                 "DDP rank 0 GPU 0 CPUs 0-11, MPI rank 2 GPU 0 CPUs 0-11")
    assert verdict["detail"]["mpi_rank"]["rank"] == 2


@pytest.mark.parametrize("mpi_record, words", [
    (record(0, "0-95", slot="GPU 4"), "MPI rank 2 on GPU 4: CPUs 0-95 lie outside GPU 4's NUMA node 1 (CPUs 48-95)"),
    (record(0, "0-95", plan="48-59", slot="GPU 4"), "MPI rank 2: runs on CPUs 0-95, the binder's plan gave 48-59"),
    (dict(record(0, "0-95"), plan_cpus=None), "MPI rank 2: no binder ran (no GPUFLEET_BIND_* plan in its environment)"),
])
def test_a_badly_placed_mpi_rank_fails_the_step_by_name(mpi_record, words):
    ranks = [record(0, "0-11", uuid="GPU-0")]
    verdict = placement_verdict(run(ranks), placement=EIGHT, mpi=mpi(mpi_record, status="failed"))
    assert verdict["status"] == "failed" and verdict["reason"] == words


def test_mpi_alone_is_checked_when_ddp_did_not_run():
    verdict = placement_verdict({"skipped": True}, placement=CPU_ONLY,
                                mpi=mpi(record(0, "0-1", slot="NUMA node 0")))
    assert verdict["status"] == "passed"
    assert verdict["reason"].endswith("MPI rank 2 NUMA node 0 CPUs 0-1; not run: the node-alone DDP check")


def test_an_mpi_run_without_this_nodes_record_fails():
    verdict = placement_verdict(run([record(0, "0")]), placement=CPU_ONLY, mpi=mpi(None))
    assert verdict["status"] == "failed"
    assert verdict["reason"] == "the in-image MPI check reported no placement for this node's rank"
