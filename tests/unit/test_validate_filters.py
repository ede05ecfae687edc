"""The validate role's workload verdicts (DDP and MPI runs): what ran, and failing when it did not really work."""
import json
import os
import pytest

from ansible_collections.gpufleet.cluster.plugins.filter import validate as validate_filters
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import validate_runs as v

from conftest import FIXTURES


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
ENTRIES = ["10.20.0.11", "10.20.0.12", "10.20.0.13"]


def test_the_filter_plugin_exposes_the_module_utils_functions():
    filters = validate_filters.FilterModule().filters()
    assert filters["ddp_verdict"] is v.ddp_verdict
    assert filters["mpi_verdict"] is v.mpi_verdict
    assert filters["mpi_hosts_for"] is v.mpi_hosts_for


def test_hostfile_hosts_in_order_without_comments():
    assert v.mpi_hostfile_hosts(HOSTFILE) == ENTRIES


def test_hosts_for_keeps_only_the_nodes_checked_in_hostfile_order():
    assert v.mpi_hosts_for(HOSTFILE, HOSTVARS, ["gpu-03", "gpu-01"]) == ["10.20.0.11", "10.20.0.13"]
    assert v.mpi_hosts_for(HOSTFILE, HOSTVARS, HOSTS) == ENTRIES


def test_prefixed_json_takes_the_last_object_line():
    out = 'W1129 noise\nGPUFLEET_DDP_RESULT {"passed": false}\nGPUFLEET_DDP_RESULT {"passed": true}\nbye\n'
    assert v.ddp_result(out) == {"passed": True}
    assert v.ddp_result("no result here") == {}
    assert v.ddp_result("GPUFLEET_DDP_RESULT {broken") == {}
    assert v.mpi_result('GPUFLEET_MPI_RESULT [1, 2]') == {}


# --- DDP ------------------------------------------------------------------------------------------------------

def ddp_run(rc=0, **result):
    body = dict(passed=True, problems=[], backend="gloo", world_size=6, nnodes=3,
                hosts=["gpu-01", "gpu-02", "gpu-03"], busbw_gbps=0.412, algbw_gbps=0.247,
                size_bytes=16 << 20, torch="2.6.0", device="cpu")
    body.update(result)
    return {"rc": rc, "stdout": "noise\nGPUFLEET_DDP_RESULT " + json.dumps(body) + "\n", "stderr": ""}


def test_gloo_fleet_run_passes_and_says_it_was_not_nccl():
    verdict = v.ddp_verdict(ddp_run(), backend="gloo", scope="fleet", expect_world_size=6, expect_nnodes=3)
    assert verdict["status"] == "passed"
    assert verdict["reason"].startswith("gloo, 6 rank(s) on gpu-01, gpu-02, gpu-03; all_reduce busbw 0.412 GB/s")
    assert "NCCL not run" in verdict["reason"]
    assert verdict["detail"]["backend"] == "gloo"
    assert verdict["detail"]["hosts"] == HOSTS


@pytest.mark.parametrize("result, expect_world, expect_nodes, words", [
    (dict(world_size=2, nnodes=1, hosts=["gpu-01"]), 6, 3, "world size 2, expected 6"),
    (dict(nnodes=1, hosts=["gpu-01"]), 6, 3, "ranks ran on 1 node(s), expected 3"),
    (dict(backend="nccl"), 6, 3, "ran with backend nccl, expected gloo"),
    (dict(passed=False, problems=["all_reduce returned 5.0, expected 6.0"]), 6, 3, "all_reduce returned 5.0"),
])
def test_a_run_that_did_not_do_what_was_asked_fails(result, expect_world, expect_nodes, words):
    verdict = v.ddp_verdict(ddp_run(**result), backend="gloo", scope="fleet", expect_world_size=expect_world,
                            expect_nnodes=expect_nodes)
    assert verdict["status"] == "failed"
    assert words in verdict["reason"]


def test_no_result_line_fails_with_the_last_line_of_output():
    run = {"rc": 1, "stdout": "", "stderr": "Traceback\nRuntimeError: connect() timed out\n"}
    verdict = v.ddp_verdict(run, backend="gloo", scope="fleet", expect_world_size=6, expect_nnodes=3)
    assert verdict["status"] == "failed"
    assert "printed no result (RuntimeError: connect() timed out)" in verdict["reason"]


def test_nonzero_exit_with_a_passing_line_still_fails():
    verdict = v.ddp_verdict(ddp_run(rc=137), backend="gloo", scope="node", expect_world_size=6, expect_nnodes=3)
    assert verdict["status"] == "failed"
    assert "torchrun exited 137" in verdict["reason"]


def test_skips_say_why_and_never_pass():
    assert v.ddp_verdict({"skipped": True}, backend="gloo", scope="node",
                         skip_reason="no verified training image on the node") \
        == {"status": "skipped", "reason": "no verified training image on the node", "detail": {"backend": "gloo"}}
    assert v.ddp_verdict({}, backend="nccl", scope="fleet")["status"] == "skipped"


def test_floor_is_named_in_the_reason():
    verdict = v.ddp_verdict(ddp_run(), backend="gloo", scope="node", expect_world_size=6, expect_nnodes=3,
                            min_busbw_gbps=0.1)
    assert "(floor 0.1)" in verdict["reason"]
    assert "(no floor set)" in v.ddp_verdict(ddp_run(), backend="gloo", scope="node", expect_world_size=6,
                                             expect_nnodes=3)["reason"]


# --- MPI ------------------------------------------------------------------------------------------------------

def mpi_run(rc=0, ranks=None, **result):
    ranks = ranks if ranks is not None else [
        {"rank": 0, "host": "gpu-01"}, {"rank": 1, "host": "gpu-02.cluster.local"}, {"rank": 2, "host": "gpu-03"}]
    body = dict(passed=True, problems=[], world_size=len(ranks), ranks=ranks,
                hosts=sorted(set(r["host"] for r in ranks)), nnodes=len(set(r["host"] for r in ranks)),
                mpi_library="Open MPI v5.0.7, package: Debian OpenMPI, ident: 5.0.7",
                allreduce={"expected": {"sum": 6, "max": 2}, "got": {"sum": 6, "max": 2}}, pml="ob1", btl=["self", "sm", "tcp"],
                btl_used=["self", "tcp"])
    body.update(result)
    return {"rc": rc, "stdout": "GPUFLEET_MPI_RESULT " + json.dumps(body) + "\n", "stderr": ""}


def test_every_rank_on_its_node_passes_and_says_what_ran():
    verdict = v.mpi_verdict(mpi_run(), where="image", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS, me="gpu-02")
    assert verdict["status"] == "passed", verdict
    assert verdict["reason"].startswith("mpirun in the training image, ranks started in the image on every node: "
                                        "3 rank(s) on gpu-01, gpu-02.cluster.local, gpu-03; Open MPI v5.0.7")
    assert "pml ob1, btl self,tcp" in verdict["reason"]
    assert verdict["detail"]["btl_used"] == ["self", "tcp"]
    assert [r["inventory_host"] for r in verdict["detail"]["ranks"]] == HOSTS


def test_the_image_verdict_keeps_where_this_nodes_rank_ran_for_the_placement_step():
    ranks = [{"rank": 0, "host": "gpu-01"},
             {"rank": 1, "host": "gpu-02", "placement": {"local_rank": 0, "cpus": "0-3", "plan_cpus": "0-3"}},
             {"rank": 2, "host": "gpu-03"}]
    verdict = v.mpi_verdict(mpi_run(ranks=ranks), where="image", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS,
                            me="gpu-02")
    assert verdict["detail"]["placement"] == {"rank": 1, "local_rank": 0, "cpus": "0-3", "plan_cpus": "0-3"}
    host = v.mpi_verdict(mpi_run(ranks=ranks), where="host", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS,
                         me="gpu-02")
    assert "placement" not in host["detail"]
    assert "placement" not in v.mpi_verdict(mpi_run(ranks=ranks), where="image", entries=ENTRIES, hostvars=HOSTVARS,
                                            hosts=HOSTS, me="gpu-01")["detail"]


def test_rank_on_the_wrong_node_fails():
    ranks = [{"rank": 0, "host": "gpu-01"}, {"rank": 1, "host": "gpu-01"}, {"rank": 2, "host": "gpu-03"}]
    verdict = v.mpi_verdict(mpi_run(ranks=ranks), where="host", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS,
                            me="gpu-01")
    assert verdict["status"] == "failed"
    assert "rank 1 ran on gpu-01, expected gpu-02" in verdict["reason"]


def test_missing_rank_and_failed_allreduce_fail():
    ranks = [{"rank": 0, "host": "gpu-01"}, {"rank": 2, "host": "gpu-03"}]
    verdict = v.mpi_verdict(mpi_run(ranks=ranks, passed=False, problems=["allreduce sum 4, expected 6"]),
                            where="host", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS, me="gpu-01")
    assert verdict["status"] == "failed"
    assert "allreduce sum 4, expected 6" in verdict["reason"]
    assert "rank 1 (10.20.0.12) reported nothing" in verdict["reason"]


def test_launcher_only_output_is_not_mpi():
    # What the old check accepted: every node echoed its name, no MPI_Init, no message exchanged.
    run = {"rc": 0, "stdout": "GPUFLEET_RANK 0 gpu-01\nGPUFLEET_RANK 1 gpu-02\nGPUFLEET_RANK 2 gpu-03\n", "stderr": ""}
    verdict = v.mpi_verdict(run, where="host", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS, me="gpu-01")
    assert verdict["status"] == "failed"
    assert "printed no result" in verdict["reason"]


def test_mpirun_failure_reports_its_last_line():
    run = {"rc": 1, "stdout": "", "stderr": "ssh: connect to host 10.20.0.12 port 22: Connection refused\n"}
    verdict = v.mpi_verdict(run, where="host", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS, me="gpu-01")
    assert verdict["status"] == "failed"
    assert "mpirun exited 1: ssh: connect to host 10.20.0.12 port 22: Connection refused" in verdict["reason"]


# What the validate role's tasks hand the verdicts, and the first reason that holds (roles/validate/tasks/ddp.yml).
@pytest.mark.parametrize("kwargs, reason", [
    ({"skip_reason": "no verified training image on the node", "enabled": False},
     "no verified training image on the node"),
    ({"enabled": False}, "check off"),
    ({"enabled": False, "scope": "fleet", "expect_nnodes": 1}, "check off"),
    ({"scope": "fleet", "expect_nnodes": 1}, "no other node of the play runs gloo with a verified image"),
    ({"scope": "fleet", "expect_nnodes": 0, "backend": "nccl"},
     "no other node of the play runs nccl with a verified image"),
])
def test_ddp_skip_reasons_in_order(kwargs, reason):
    verdict = v.ddp_verdict(ddp_run(), **kwargs)
    assert (verdict["status"], verdict["reason"]) == ("skipped", reason)


def test_a_single_node_run_needs_no_peer():
    assert v.ddp_verdict(ddp_run(), scope="node", expect_nnodes=1)["status"] == "passed"


def test_verdicts_take_keywords_only():
    with pytest.raises(TypeError):
        v.ddp_verdict(ddp_run(), "gloo", "node")  # pylint: disable=too-many-function-args
    with pytest.raises(TypeError):
        # pylint: disable-next=too-many-function-args,missing-kwoa
        v.mpi_verdict(mpi_run(), "host", ENTRIES, HOSTVARS, HOSTS, "gpu-01")


# roles/validate/tasks/mpi.yml: the host run needs the hostfile and a node of it; the image run every node ready.
@pytest.mark.parametrize("where, kwargs, reason", [
    ("host", {"enabled": False, "hostfile_found": False}, "check off"),
    ("host", {"hostfile": "/etc/gpufleet/hostfile", "hostfile_found": False},
     "no MPI hostfile at /etc/gpufleet/hostfile"),
    ("host", {"hostfile": "/srv/hostfile", "entries": []},
     "the hostfile at /srv/hostfile lists none of the nodes checked"),
    ("host", {}, ""),
    ("image", {"enabled": False, "skip_reason": "x"}, "check off"),
    ("image", {"skip_reason": "the launcher step failed", "entries": []}, "the launcher step failed"),
    ("image", {"entries": []}, "no usable MPI hostfile"),
    ("image", {"not_ready": ["gpu-02", "gpu-03"]}, "nodes without a runnable verified image: gpu-02, gpu-03"),
    ("image", {}, ""),
])
def test_mpi_skip_reasons(where, kwargs, reason):
    kwargs = dict({"entries": ENTRIES}, **kwargs)
    entries = kwargs.pop("entries")
    assert v.mpi_skip_reason(where, entries, **kwargs) == reason


def test_a_host_mpi_check_asked_for_that_could_not_run_fails_and_one_switched_off_is_skipped():
    common = dict(entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS, me="gpu-01")
    missing = v.mpi_verdict({"skipped": True}, where="host", hostfile_found=False, **common)
    assert (missing["status"], missing["reason"]) == ("failed", "no MPI hostfile at /etc/gpufleet/hostfile")
    assert v.mpi_verdict({"skipped": True}, where="host", **common)["status"] == "failed"
    off = v.mpi_verdict({"skipped": True}, where="host", enabled=False, **common)
    assert (off["status"], off["reason"]) == ("skipped", "check off")
    image = v.mpi_verdict({"skipped": True}, where="image", not_ready=["gpu-02"], **common)
    assert (image["status"], image["reason"]) == ("skipped", "nodes without a runnable verified image: gpu-02")


def test_node_outside_the_hostfile_fails():
    verdict = v.mpi_verdict(mpi_run(), where="host", entries=ENTRIES,
                            hostvars=dict(HOSTVARS, login={"ansible_host": "10.9.9.9"}), hosts=HOSTS + ["login"],
                            me="login")
    assert verdict["status"] == "failed"
    assert "this node is not in the hostfile" in verdict["reason"]


def test_mpi_skip_keeps_its_reason():
    verdict = v.mpi_verdict({"skipped": True}, where="image", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS,
                            me="gpu-01", skip_reason="check off")
    assert verdict == {"status": "skipped", "reason": "check off", "detail": {"where": "image"}}


# --- NCCL: the transport NCCL reports decides, not torchrun's exit status ----------------------------------------

def nccl_run(log_name, **result):
    with open(os.path.join(FIXTURES, "nccl", log_name)) as handle:
        log = handle.read()
    run = ddp_run(backend="nccl", device="cuda", world_size=16, nnodes=2, hosts=["gpu-01", "gpu-02"],
                  busbw_gbps=38.5, **result)
    run["stderr"] = log
    return run


def test_nccl_socket_fallback_on_a_node_with_active_rdma_ports_fails():
    run = nccl_run("socket-fallback-ibext-no-ib-device-16ranks.log")
    verdict = v.ddp_verdict(run, backend="nccl", scope="fleet", expect_world_size=16, expect_nnodes=2,
                            active_rdma_ports=8)
    assert run["rc"] == 0
    assert verdict["status"] == "failed"
    assert "Socket" in verdict["reason"]
    assert verdict["detail"]["nccl"]["net"] == "Socket"


def test_nccl_socket_run_without_rdma_ports_passes_and_names_the_transport():
    verdict = v.ddp_verdict(nccl_run("socket-fallback-ibext-no-ib-device-16ranks.log"), backend="nccl", scope="fleet",
                            expect_world_size=16, expect_nnodes=2)
    assert verdict["status"] == "passed", verdict
    assert "net Socket" in verdict["reason"]


def test_nccl_over_ib_with_gdrdma_passes_and_says_so():
    verdict = v.ddp_verdict(nccl_run("ib-gdrdma-a100-nccl-2.7.6.log"), backend="nccl", scope="fleet",
                            expect_world_size=16, expect_nnodes=2, min_busbw_gbps=30, active_rdma_ports=9)
    assert verdict["status"] == "passed", verdict
    assert "net IB" in verdict["reason"] and "GPUDirect RDMA on" in verdict["reason"]
    assert "(floor 30.0)" in verdict["reason"]


def test_nccl_run_without_debug_output_fails():
    run = ddp_run(backend="nccl", device="cuda")
    verdict = v.ddp_verdict(run, backend="nccl", scope="fleet", expect_world_size=6, expect_nnodes=3)
    assert verdict["status"] == "failed"
    assert "NCCL_DEBUG=INFO output missing" in verdict["reason"]


def test_what_ran_groups_identical_verdicts_and_leaves_out_skips():
    reports = [
        {"node": "gpu-01", "steps": [
            {"step": "mpi", "status": "passed", "reason": "3 ranks"},
            {"step": "image", "status": "passed", "reason": "signature verified, d present"},
            {"step": "docker_gpu", "status": "skipped", "reason": "no NVIDIA GPU"},
            {"step": "ddp_multi_node", "status": "skipped", "reason": "check off"}]},
        {"node": "gpu-02", "steps": [
            {"step": "image", "status": "passed", "reason": "signature verified, d present"},
            {"step": "mpi", "status": "failed", "reason": "rank 1 reported nothing"}]},
    ]
    assert v.what_ran(reports) == [
        {"step": "image", "status": "passed", "reason": "signature verified, d present", "nodes": ["gpu-01", "gpu-02"]},
        {"step": "mpi", "status": "passed", "reason": "3 ranks", "nodes": ["gpu-01"]},
        {"step": "mpi", "status": "failed", "reason": "rank 1 reported nothing", "nodes": ["gpu-02"]},
    ]


def test_allreduce_words():
    assert "allreduce exact (max 2, sum 6)" in v.mpi_verdict(mpi_run(), where="host", entries=ENTRIES,
                                                             hostvars=HOSTVARS, hosts=HOSTS, me="gpu-01")["reason"]
    wrong = mpi_run(passed=False, problems=["allreduce sum 5"], allreduce={"expected": {"sum": 6}, "got": {"sum": 5}})
    assert "allreduce got sum 5, expected sum 6" in v.mpi_verdict(wrong, where="host", entries=ENTRIES,
                                                                  hostvars=HOSTVARS, hosts=HOSTS, me="gpu-01")["reason"]


# --- Fabric settings: what the container saw against the node's fabric env file ----------------------------------

# Written by hand in the format the interconnect role writes /etc/gpufleet/fabric.env in (Docker --env-file:
# KEY=VALUE lines, # comments); these are test values, not a capture of any node.
CONTRACT_ENV_FILE = """# gpufleet interconnect: fabric settings of this node
NCCL_SOCKET_IFNAME=ib0
NCCL_IB_HCA=mlx5_0:1,mlx5_1:1

  UCX_TLS=rc,sm,self
UCX_NET_DEVICES=mlx5_0:1
OMPI_MCA_btl_tcp_if_include=ib0
"""
NODE_SETTINGS = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "UCX_TLS": "rc,sm,self",
                 "UCX_NET_DEVICES": "mlx5_0:1"}


def seen(env, nccl_conf=True):
    return {"env": dict(env), "nccl_conf": nccl_conf, "ucx_conf": False}


def test_env_file_is_read_as_docker_reads_it():
    assert v.parse_env_file(CONTRACT_ENV_FILE) == dict(NODE_SETTINGS, OMPI_MCA_btl_tcp_if_include="ib0")
    # The value is everything after the first '=', as written; a name alone carries no value; a bad name is no key.
    assert v.parse_env_file('A=b=c\nQ="x y"\nBARE\nBAD KEY=1\n=x\n\ufeffB=1\n') == {"A": "b=c", "Q": '"x y"', "B": "1"}
    assert v.parse_env_file(None) == {}


def test_every_node_setting_seen_in_the_container_passes_and_the_detail_shows_what_ran():
    verdict = v.ddp_verdict(ddp_run(fabric=seen(dict(NODE_SETTINGS, NCCL_DEBUG="INFO"))), backend="gloo",
                            scope="node", expect_world_size=6, expect_nnodes=3, fabric_env=CONTRACT_ENV_FILE,
                            nccl_env={"NCCL_DEBUG": "INFO"})
    assert verdict["status"] == "passed", verdict
    fabric = verdict["detail"]["fabric"]
    assert fabric["ran"]["NCCL_SOCKET_IFNAME"] == "ib0" and fabric["ran"]["NCCL_IB_HCA"] == "mlx5_0:1,mlx5_1:1"
    assert fabric["ran"]["UCX_TLS"] == "rc,sm,self" and fabric["nccl_conf"] is True
    assert fabric["node"] == NODE_SETTINGS and fabric["missing"] == []
    assert fabric["not_compared"] == ["OMPI_MCA_btl_tcp_if_include"]
    assert "fabric env: 4 of 4 setting(s) of /etc/gpufleet/fabric.env seen in the container" in verdict["reason"]


def test_a_node_setting_the_container_did_not_see_fails_naming_the_key():
    ran = dict(NODE_SETTINGS)
    del ran["NCCL_IB_HCA"], ran["UCX_TLS"]
    verdict = v.ddp_verdict(ddp_run(fabric=seen(ran)), backend="gloo", scope="fleet", expect_world_size=6,
                            expect_nnodes=3, fabric_env=CONTRACT_ENV_FILE)
    assert verdict["status"] == "failed"
    assert "NCCL_IB_HCA, UCX_TLS of /etc/gpufleet/fabric.env did not reach the container" in verdict["reason"]
    assert verdict["detail"]["fabric"]["missing"] == ["NCCL_IB_HCA", "UCX_TLS"]


def test_a_different_value_fails_unless_the_run_set_it_itself():
    ran = dict(NODE_SETTINGS, NCCL_SOCKET_IFNAME="eth0")
    verdict = v.ddp_verdict(ddp_run(fabric=seen(ran)), backend="gloo", scope="node", expect_world_size=6,
                            expect_nnodes=3, fabric_env=CONTRACT_ENV_FILE)
    assert verdict["status"] == "failed"
    assert "NCCL_SOCKET_IFNAME is 'eth0' in the container, 'ib0' in /etc/gpufleet/fabric.env" in verdict["reason"]
    # validate_nccl_env is the environment of an NCCL run: what it sets may differ from the file.
    run = nccl_run("ib-gdrdma-a100-nccl-2.7.6.log", fabric=seen(ran))
    verdict = v.ddp_verdict(run, backend="nccl", scope="node", fabric_env=CONTRACT_ENV_FILE,
                            nccl_env={"NCCL_SOCKET_IFNAME": "eth0"})
    assert verdict["status"] == "passed", verdict
    assert verdict["detail"]["fabric"]["set_by_caller"] == ["NCCL_SOCKET_IFNAME"]
    assert "(NCCL_SOCKET_IFNAME set by the run)" in verdict["reason"]
    # A gloo run is given no such environment, so nccl_env excuses nothing there.
    verdict = v.ddp_verdict(ddp_run(fabric=seen(ran)), backend="gloo", scope="node", fabric_env=CONTRACT_ENV_FILE,
                            nccl_env={"NCCL_SOCKET_IFNAME": "eth0"})
    assert verdict["status"] == "failed"


def test_a_node_without_the_file_says_so_and_does_not_fail_for_it():
    verdict = v.ddp_verdict(ddp_run(fabric=seen({}, nccl_conf=False)), backend="gloo", scope="node",
                            expect_world_size=6, expect_nnodes=3)
    assert verdict["status"] == "passed", verdict
    assert verdict["detail"]["fabric"]["note"] == (
        "no /etc/gpufleet/fabric.env on the node: the container's settings were not compared with it")
    assert "fabric env: no /etc/gpufleet/fabric.env on the node" in verdict["reason"]
    assert verdict["detail"]["fabric"]["nccl_conf"] is False


def test_a_check_that_reported_no_settings_fails_where_the_node_has_the_file():
    verdict = v.ddp_verdict(ddp_run(), backend="gloo", scope="node", expect_world_size=6, expect_nnodes=3,
                            fabric_env=CONTRACT_ENV_FILE)
    assert verdict["status"] == "failed"
    assert "did not report the NCCL/UCX settings it saw" in verdict["reason"]


def test_in_image_mpi_compares_this_nodes_rank_with_this_nodes_file():
    ranks = [{"rank": 0, "host": "gpu-01", "fabric": seen(NODE_SETTINGS)},
             {"rank": 1, "host": "gpu-02", "fabric": seen({"UCX_TLS": "rc,sm,self"})},
             {"rank": 2, "host": "gpu-03"}]
    good = v.mpi_verdict(mpi_run(ranks=ranks), where="image", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS,
                         me="gpu-01", fabric_env=CONTRACT_ENV_FILE)
    assert good["status"] == "passed", good
    assert good["detail"]["fabric"]["ran"] == NODE_SETTINGS
    bad = v.mpi_verdict(mpi_run(ranks=ranks), where="image", entries=ENTRIES, hostvars=HOSTVARS, hosts=HOSTS,
                        me="gpu-02", fabric_env=CONTRACT_ENV_FILE)
    assert bad["status"] == "failed"
    assert ("rank 1: NCCL_IB_HCA, NCCL_SOCKET_IFNAME, UCX_NET_DEVICES of /etc/gpufleet/fabric.env did not reach "
            "the container") in bad["reason"]
    # The host run is not in a container: no comparison there.
    assert "fabric" not in v.mpi_verdict(mpi_run(ranks=ranks), where="host", entries=ENTRIES, hostvars=HOSTVARS,
                                         hosts=HOSTS, me="gpu-02", fabric_env=CONTRACT_ENV_FILE)["detail"]


def test_the_verdicts_take_what_slurp_registered():
    import base64
    read = {"content": base64.b64encode(CONTRACT_ENV_FILE.encode()).decode(), "encoding": "base64"}
    ran = dict(NODE_SETTINGS)
    del ran["UCX_NET_DEVICES"]
    verdict = v.ddp_verdict(ddp_run(fabric=seen(ran)), backend="gloo", scope="node", expect_world_size=6,
                            expect_nnodes=3, fabric_env=read)
    assert "UCX_NET_DEVICES of /etc/gpufleet/fabric.env did not reach the container" in verdict["reason"]
    # slurp of a missing file registers no content (failed_when: false), a skipped slurp neither: no file.
    for missing in ({"failed": True, "msg": "file not found: /etc/gpufleet/fabric.env"}, {"skipped": True}):
        verdict = v.ddp_verdict(ddp_run(fabric=seen(ran)), backend="gloo", scope="node", expect_world_size=6,
                                expect_nnodes=3, fabric_env=missing)
        assert verdict["status"] == "passed" and verdict["detail"]["fabric"]["node_env_present"] is False
