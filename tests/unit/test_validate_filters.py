"""Filters the validate role reads its checks' output with."""
from ansible_collections.gpufleet.cluster.plugins.filter import validate as f

HOSTFILE = """# Written by gpufleet
10.20.0.11 slots=8
10.20.0.12 slots=8  # second node

10.20.0.13 slots=8
"""

HOSTVARS = {
    "gpu-01": {"ansible_host": "10.20.0.11", "ansible_facts": {"hostname": "gpu-01"}},
    "gpu-02": {"ansible_host": "10.20.0.99", "gpufleet_cluster_address": "10.20.0.12",
               "ansible_facts": {"hostname": "gpu-02"}},
    "gpu-03": {"ansible_host": "10.20.0.13", "ansible_facts": {"hostname": "gpu-03"}},
}
HOSTS = ["gpu-01", "gpu-02", "gpu-03"]


def test_hostfile_hosts_in_order_without_comments():
    assert f.mpi_hostfile_hosts(HOSTFILE) == ["10.20.0.11", "10.20.0.12", "10.20.0.13"]


ENTRIES = ["10.20.0.11", "10.20.0.12", "10.20.0.13"]


def test_hosts_for_keeps_only_the_nodes_checked_in_hostfile_order():
    assert f.mpi_hosts_for(HOSTFILE, HOSTVARS, ["gpu-03", "gpu-01"]) == ["10.20.0.11", "10.20.0.13"]
    assert f.mpi_hosts_for(HOSTFILE, HOSTVARS, HOSTS) == ENTRIES


def test_every_rank_on_its_node_passes():
    out = "GPUFLEET_RANK 0 gpu-01\nGPUFLEET_RANK 2 gpu-03.cluster.local\nGPUFLEET_RANK 1 gpu-02\n"
    check = f.mpi_rank_check(out, ENTRIES, HOSTVARS, HOSTS)
    assert check["problems"] == []
    assert [r["inventory_host"] for r in check["ranks"]] == HOSTS
    assert all(r["ok"] for r in check["ranks"])


def test_rank_on_the_wrong_node_fails():
    out = "GPUFLEET_RANK 0 gpu-01\nGPUFLEET_RANK 1 gpu-01\nGPUFLEET_RANK 2 gpu-03\n"
    check = f.mpi_rank_check(out, ENTRIES, HOSTVARS, HOSTS)
    assert check["problems"] == ["rank 1 ran on gpu-01, expected gpu-02"]
    assert [r["ok"] for r in check["ranks"]] == [True, False, True]


def test_missing_and_extra_ranks_are_named():
    out = "GPUFLEET_RANK 0 gpu-01\nGPUFLEET_RANK 7 gpu-01\n"
    check = f.mpi_rank_check(out, ENTRIES, HOSTVARS, HOSTS)
    assert "rank 1 (10.20.0.12) reported nothing" in check["problems"]
    assert "rank 2 (10.20.0.13) reported nothing" in check["problems"]
    assert "unexpected ranks 7" in check["problems"]


def test_empty_hostfile_is_a_problem():
    assert f.mpi_rank_check("", [], HOSTVARS, HOSTS)["problems"] == [
        "the hostfile lists none of the nodes checked"]


def test_ddp_result_takes_the_json_line():
    out = 'W1129 noise\nGPUFLEET_DDP_RESULT {"passed": true, "busbw_gbps": 371.2}\nbye\n'
    assert f.ddp_result(out) == {"passed": True, "busbw_gbps": 371.2}
    assert f.ddp_result("no result here") == {}
    assert f.ddp_result("GPUFLEET_DDP_RESULT {broken") == {}
