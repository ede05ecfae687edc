"""rdma_facts and module_utils/rdma on recorded sysfs trees (tests/fixtures/sysfs/, see its README.md).

Trees: `ib_ndr_active` (one ConnectX-7 port, ACTIVE, 400 Gb/sec (4X NDR), InfiniBand), `roce_active`
(one ConnectX-6 Dx port, ACTIVE, 100 Gb/sec (4X EDR), Ethernet, with its GID table) and `ib_port_down`
(the NDR HCA plus a second one whose port is DOWN/Disabled), `nvswitch_cx7_bf3` (two ConnectX-7 compute
HCAs and a BlueField-3 DPU carrying storage/management, laid out for the management-HCA split).
"""
import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.cluster.plugins.module_utils import rdma
from ansible_collections.gpufleet.cluster.plugins.modules import rdma_facts

from conftest import FIXTURES

SYSFS = os.path.join(FIXTURES, "sysfs")
IB = os.path.join(SYSFS, "ib_ndr_active")
ROCE = os.path.join(SYSFS, "roce_active")
DOWN = os.path.join(SYSFS, "ib_port_down")
BF3 = os.path.join(SYSFS, "nvswitch_cx7_bf3")


def params(root, **overrides):
    values = dict(sysfs_root=root, exclude_hcas=[], expect_hcas=None, expect_state=None,
                  min_rate_gbps=None, link_layer=None, default_gid_index=3)
    values.update(overrides)
    return values


def test_fixture_symlinks_are_the_kernels():
    link = os.path.join(IB, "sys/class/infiniband/mlx5_0")
    assert os.readlink(link) == "../../devices/pci0000:15/0000:15:01.0/0000:1a:00.0/infiniband/mlx5_0"
    assert os.readlink(os.path.join(link, "device")) == "../../../0000:1a:00.0"


def test_ib_ndr_port_is_read():
    hcas = rdma.gather(IB)
    assert [h["name"] for h in hcas] == ["mlx5_0"]
    hca = hcas[0]
    assert hca["pci_address"] == "0000:1a:00.0"
    assert hca["numa_node"] == 0
    assert hca["netdevs"] == ["ibp26s0"]
    port = hca["ports"][0]
    assert port == {
        "port": 1, "name": "mlx5_0:1", "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400.0,
        "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand", "netdev": None,
        "roce_v2_ipv4_gid_index": None,
    }
    summary = rdma.summarize(hcas)
    assert summary["infiniband"] and not summary["roce"]
    assert summary["nccl_ib_hca"] == "=mlx5_0:1"
    assert summary["nccl_ib_gid_index"] is None
    assert summary["ports"] == ["mlx5_0:1"]


def test_roce_port_gid_table_gives_the_rocev2_ipv4_index():
    hcas = rdma.gather(ROCE)
    hca = hcas[0]
    assert hca["pci_address"] == "0000:31:00.0"
    assert hca["numa_node"] == 1
    assert hca["netdevs"] == ["enp49s0f0np0"]
    port = hca["ports"][0]
    assert port["link_layer"] == "Ethernet"
    assert port["rate_gbps"] == 100.0
    assert port["netdev"] == "enp49s0f0np0"
    gids = rdma.read_gid_table(ROCE, "mlx5_0", 1)
    # slot 4 is all zeros in the recorded tree: an unused slot is not reported
    assert [(g["index"], g["type"]) for g in gids] == [
        (0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"), (3, "RoCE v2")]
    assert port["roce_v2_ipv4_gid_index"] == 3
    summary = rdma.summarize(hcas)
    assert summary["roce"] and not summary["infiniband"]
    assert summary["nccl_ib_gid_index"] == 3
    assert summary["link_layers"] == ["Ethernet"]


def test_roce_without_ipv4_gid_falls_back_to_default_index():
    gids = [{"index": 0, "gid": "fe80:0000:0000:0000:8ae9:a4ff:fe9c:7f1a", "type": "IB/RoCE v1", "ndev": "x"},
            {"index": 1, "gid": "fe80:0000:0000:0000:8ae9:a4ff:fe9c:7f1a", "type": "RoCE v2", "ndev": "x"}]
    assert rdma.roce_v2_ipv4_gid_index(gids) is None
    hcas = [{"name": "mlx5_0", "ports": [{"port": 1, "name": "mlx5_0:1", "state": "ACTIVE",
                                          "link_layer": "Ethernet", "roce_v2_ipv4_gid_index": None}]}]
    assert rdma.summarize(hcas, default_gid_index=5)["nccl_ib_gid_index"] == 5


def test_no_infiniband_class_means_no_hcas(tmp_path):
    assert rdma.gather(str(tmp_path)) == []
    summary = rdma.summarize([])
    assert summary["hca_count"] == 0
    assert summary["nccl_ib_hca"] is None
    assert summary["nccl_ib_gid_index"] is None
    assert summary["ports"] == []


def test_all_expectations_met_gives_no_problem():
    facts, problems = rdma_facts.run(params(
        IB, expect_hcas=1, expect_state="ACTIVE", min_rate_gbps=400, link_layer="InfiniBand"))
    assert problems == []
    assert facts["hca_count"] == 1


def test_down_port_gives_one_line_for_that_port_only():
    facts, problems = rdma_facts.run(params(DOWN, expect_hcas=2, expect_state="ACTIVE", min_rate_gbps=400))
    assert problems == [
        "mlx5_1 port 1 (0000:3c:00.0): expected state ACTIVE; found state DOWN (phys Disabled)"]
    assert facts["active_port_count"] == 1
    assert facts["port_count"] == 2


def test_each_miss_of_a_port_is_named_on_its_line():
    _unused, problems = rdma_facts.run(params(ROCE, expect_state="ACTIVE", min_rate_gbps=400, link_layer="InfiniBand"))
    assert problems == [
        "mlx5_0 port 1 (0000:31:00.0): expected rate >= 400 Gb/s, link layer InfiniBand; "
        "found rate 100 Gb/sec (4X EDR), link layer Ethernet"]


def test_hca_count_miss_lists_what_is_there():
    _unused, problems = rdma_facts.run(params(DOWN, expect_hcas=8))
    assert problems == ["expected 8 RDMA HCA(s), found 2 (mlx5_0, mlx5_1)"]


def test_expectations_on_a_node_without_hcas(tmp_path):
    _unused, problems = rdma_facts.run(params(str(tmp_path), expect_hcas=8, expect_state="ACTIVE"))
    assert problems == ["expected 8 RDMA HCA(s), found 0 under /sys/class/infiniband"]
    _unused, problems = rdma_facts.run(params(str(tmp_path), expect_state="ACTIVE"))
    assert problems == ["expected RDMA ports to check, found no RDMA device under /sys/class/infiniband"]


def test_excluded_hca_is_neither_counted_nor_checked():
    facts, problems = rdma_facts.run(params(DOWN, exclude_hcas=["mlx5_1"], expect_hcas=1, expect_state="ACTIVE"))
    assert problems == []
    assert facts["excluded"] == ["mlx5_1"]
    assert [h["name"] for h in facts["hcas"]] == ["mlx5_0"]
    assert facts["nccl_ib_hca"] == "=mlx5_0:1"


def run_main(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            rdma_facts.main()
    return json.loads(capsys.readouterr().out)


def test_module_returns_facts(capsys):
    result = run_main(capsys, {"sysfs_root": ROCE, "_ansible_check_mode": True})
    assert not result.get("failed")
    assert result["changed"] is False
    rdma_facts_fact = result["ansible_facts"]["gpufleet_rdma"]
    assert rdma_facts_fact["hcas"][0]["ports"][0]["roce_v2_ipv4_gid_index"] == 3


def test_module_fails_with_one_line_per_port(capsys):
    result = run_main(capsys, {"sysfs_root": DOWN, "expect_state": "ACTIVE"})
    assert result["failed"]
    assert result["msg"] == (
        "RDMA expectations not met:\n"
        "mlx5_1 port 1 (0000:3c:00.0): expected state ACTIVE; found state DOWN (phys Disabled)")
    assert len(result["problems"]) == 1


def test_module_rejects_an_unknown_link_layer(capsys):
    result = run_main(capsys, {"sysfs_root": IB, "link_layer": "Omni-Path"})
    assert result["failed"]
    assert "link_layer" in result["msg"]


def test_pci_ids_and_models_are_read():
    hcas = rdma.gather(IB)
    assert (hcas[0]["pci_vendor_id"], hcas[0]["pci_device_id"], hcas[0]["model"]) == (
        "0x15b3", "0x1021", "ConnectX-7")
    assert rdma.gather(ROCE)[0]["model"] == "ConnectX-6 Dx"
    assert [h["model"] for h in rdma.gather(BF3)] == [
        "ConnectX-7", "ConnectX-7", "BlueField-3 (integrated ConnectX-7)"]


def test_bluefield_dpu_is_kept_out_of_nccl_and_ucx():
    facts, problems = rdma_facts.run(params(BF3, expect_hcas=2, expect_state="ACTIVE", link_layer="InfiniBand"))
    # the DPU's Ethernet port would miss the InfiniBand expectation if it were still selected
    assert problems == []
    assert facts["management"] == ["mlx5_2"]
    mgmt = facts["management_hcas"][0]
    assert (mgmt["pci_address"], mgmt["role"]) == ("0000:9b:00.0", "management")
    assert mgmt["role_reason"] == ("PCI device 0xa2dc (BlueField-3 (integrated ConnectX-7)) is in "
                                   "management_device_ids")
    assert [h["name"] for h in facts["hcas"]] == ["mlx5_0", "mlx5_1"]
    assert [h["role"] for h in facts["hcas"]] == ["compute", "compute"]
    assert facts["nccl_ib_hca"] == "=mlx5_0:1,mlx5_1:1"
    assert facts["ports"] == ["mlx5_0:1", "mlx5_1:1"]
    assert facts["hca_count"] == 2 and not facts["roce"]
    assert facts["excluded"] == []


def test_operator_lists_override_the_device_ids():
    # A Spectrum-X node whose BlueField-3 SuperNICs are the compute fabric: no device id is management.
    facts, _unused = rdma_facts.run(params(BF3, management_device_ids=[]))
    assert facts["management"] == [] and facts["hca_count"] == 3
    assert facts["roce"] and facts["infiniband"]
    # A ConnectX-7 kept for storage by name, on top of the DPU.
    facts, _unused = rdma_facts.run(params(BF3, management_hcas=["mlx5_1"]))
    assert facts["management"] == ["mlx5_1", "mlx5_2"]
    assert facts["management_hcas"][0]["role_reason"] == "named in management_hcas"
    assert facts["nccl_ib_hca"] == "=mlx5_0:1"


def test_module_reports_management_hcas(capsys):
    result = run_main(capsys, {"sysfs_root": BF3})
    fact = result["ansible_facts"]["gpufleet_rdma"]
    assert fact["management"] == ["mlx5_2"]
    assert fact["management_hcas"][0]["ports"][0]["netdev"] == "enp155s0f0np0"
