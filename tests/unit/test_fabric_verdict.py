"""validate's fabric step: fabric_verdict (plugin_utils/verdicts.py) on what rdma_facts and gpudirect_facts register.

The RDMA facts are read by ``rdma_facts.run`` (rdma.gather) from the recorded sysfs trees in tests/fixtures/sysfs
(see its README.md): ``ib_ndr_active`` (one ACTIVE 400 Gb/s InfiniBand port), ``roce_active`` (one ACTIVE
100 Gb/s RoCE port with its GID table), ``ib_port_down`` (a second HCA whose port is DOWN/Disabled) and
``h200_vm`` (a GPU node without /sys/class/infiniband). The RoCE port without an IPv4 GID is ``roce_active``
copied with GID slots 2 and 3 cleared the way the kernel leaves them when the netdev has no IPv4 address (all
zeros, no gid_attrs). The GPUDirect results come from the gpudirect_facts module run on /proc trees laid out as
in test_gpudirect.py (the MLNX_OFED kallsyms and the H200's open-module driver version are recorded fixtures).
"""
import os
import shutil

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import verdicts as vd
from ansible_collections.gpufleet.cluster.plugins.modules import gpudirect_facts, rdma_facts

from conftest import FIXTURES
from module_harness import Exit, Fail, patch_module
from test_gpudirect import DEBIAN_13, EL9, driver_version_text, kallsyms_lines, no_commands, proc_tree

SYSFS = os.path.join(FIXTURES, "sysfs")
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ...\n"
ROCE_PORT = "sys/devices/pci0000:30/0000:30:02.0/0000:31:00.0/infiniband/mlx5_0/ports/1"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def rdma(tree, **params):
    """What the fabric step's rdma_facts (no expectations) registers on a sysfs tree."""
    values = dict(sysfs_root=tree if os.path.isabs(tree) else os.path.join(SYSFS, tree), exclude_hcas=[],
                  expect_hcas=None, expect_state=None, min_rate_gbps=None, link_layer=None, default_gid_index=3)
    values.update(params)
    facts, problems = rdma_facts.run(values)
    assert problems == []
    return {"changed": False, "failed": False, "problems": [], "ansible_facts": {"gpufleet_rdma": facts}}


@pytest.fixture
def gpudirect(tmp_path, monkeypatch):
    """gpudirect(gpu_count, hca_count, ...) -> what the fabric step's gpudirect_facts registers (failed_when: false)."""
    patch_module(monkeypatch, no_commands)
    made = []

    def run(gpu_count, hca_count, kernel=DEBIAN_13, driver=None, kallsyms=(), modules="", preference="auto"):
        root = tmp_path / ("proc%d" % len(made))
        made.append(root)
        tree = proc_tree(root, list(kallsyms), modules=modules, driver=driver)
        args = dict(root=tree, gpu_count=gpu_count, hca_count=hca_count, kernel_release=kernel,
                    preference=preference)
        with patch_module_args(args):
            try:
                gpudirect_facts.main()
            except Exit as done:
                return done.args[0]
            except Fail as failed:
                return dict(failed.args[0], failed=False, failed_when_result=False)
        raise AssertionError("gpudirect_facts returned without exit_json or fail_json")
    return run


@pytest.fixture
def roce_no_gid(tmp_path):
    """roce_active with the IPv4 GIDs gone (slots 2 and 3 zero, their gid_attrs unreadable)."""
    tree = str(tmp_path / "roce_no_ipv4")
    shutil.copytree(os.path.join(SYSFS, "roce_active"), tree, symlinks=True)
    port = os.path.join(tree, ROCE_PORT)
    for index in ("2", "3"):
        with open(os.path.join(port, "gids", index), "w") as handle:
            handle.write(ZERO_GID + "\n")
        for attr in ("types", "ndevs"):
            os.remove(os.path.join(port, "gid_attrs", attr, index))
    return tree


HGX_NDR = {"expect_hcas": 1, "expect_ports": 1, "min_active_ports": 1, "expect_state": "ACTIVE",
           "min_rate_gbps": 400, "link_layer": "InfiniBand", "gpudirect": "dmabuf"}


def check(fabric, gpudirect=None, expect=None):
    got = vd.fabric_verdict(fabric, gpudirect, expect)
    assert got["status"] in ("passed", "failed", "skipped") and "\n" not in got["reason"]
    return got


def test_ndr_node_meeting_the_profile_passes_with_what_it_found(gpudirect):
    got = check(rdma("ib_ndr_active"), gpudirect(1, 1, driver=driver_version_text()), HGX_NDR)
    assert got["status"] == "passed"
    assert got["reason"].startswith(
        "profile met (expect_hcas=1, expect_ports=1, expect_state=ACTIVE, gpudirect=dmabuf, link_layer=InfiniBand, "
        "min_active_ports=1, min_rate_gbps=400.0); found 1 port(s) on 1 HCA(s): ACTIVE; 400 Gb/s; InfiniBand; "
        "GPUDirect RDMA dmabuf (usable): DMA-BUF: kernel 6.12.48+deb13-amd64")
    assert got["detail"]["ports"] == [{
        "name": "mlx5_0:1", "hca": "mlx5_0", "port": 1, "pci_address": "0000:1a:00.0", "firmware": "28.39.2048",
        "state": "ACTIVE",
        "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400.0, "link_layer": "InfiniBand",
        "gid_index": None, "netdev": "ibp26s0"}]
    assert got["detail"]["gpudirect"]["method"] == "dmabuf" and got["detail"]["gpudirect"]["usable"] is True
    assert got["detail"]["problems"] == []


def test_fewer_ports_than_the_profile_fails_naming_what_is_there():
    got = check(rdma("ib_ndr_active"), None, {"expect_ports": 2, "expect_hcas": 2})
    assert got["status"] == "failed"
    assert got["detail"]["problems"] == ["expected 2 RDMA HCA(s), found 1 (mlx5_0)",
                                         "expected at least 2 RDMA port(s), found 1 (mlx5_0:1)"]
    assert got["reason"] == "; ".join(got["detail"]["problems"])


def test_more_ports_than_expect_ports_pass():
    assert check(rdma("ib_port_down"), None, {"expect_ports": 1})["status"] == "passed"


def test_down_port_fails_active_count_and_state_naming_the_port():
    got = check(rdma("ib_port_down"), None, {"min_active_ports": 2, "expect_state": "ACTIVE"})
    assert got["detail"]["problems"] == [
        "expected at least 2 ACTIVE port(s), found 1 (mlx5_0:1 ACTIVE, mlx5_1:1 DOWN)",
        "mlx5_1:1 (0000:3c:00.0): expected state ACTIVE; found state DOWN (phys Disabled)"]
    assert got["status"] == "failed"


def test_lower_rate_fails_on_the_port_with_its_rate():
    got = check(rdma("roce_active"), None, {"min_rate_gbps": 200})
    assert got["status"] == "failed"
    assert got["reason"] == "mlx5_0:1 (0000:31:00.0): expected rate >= 200 Gb/s; found rate 100 Gb/sec (4X EDR)"


def test_every_miss_of_one_port_is_on_its_line():
    got = check(rdma("roce_active"), None, {"min_rate_gbps": 400, "link_layer": "InfiniBand"})
    assert got["detail"]["problems"] == [
        "mlx5_0:1 (0000:31:00.0): expected rate >= 400 Gb/s, link layer InfiniBand; "
        "found rate 100 Gb/sec (4X EDR), link layer Ethernet"]


def test_roce_port_reports_its_gid_index_and_netdev():
    got = check(rdma("roce_active"), None, {"link_layer": "Ethernet", "expect_state": "ACTIVE"})
    assert got["status"] == "passed"
    port = got["detail"]["ports"][0]
    assert (port["gid_index"], port["netdev"], port["link_layer"]) == (3, "enp49s0f0np0", "Ethernet")


def test_roce_without_an_ipv4_gid_fails_with_a_profile(roce_no_gid):
    fabric = rdma(roce_no_gid)
    assert fabric["ansible_facts"]["gpufleet_rdma"]["hcas"][0]["ports"][0]["roce_v2_ipv4_gid_index"] is None
    got = check(fabric, None, {"link_layer": "Ethernet"})
    assert got["status"] == "failed"
    assert got["reason"] == ("mlx5_0:1 (0000:31:00.0): expected a RoCE v2 GID with an IPv4 address "
                             "(NCCL_IB_GID_INDEX); found none in the GID table (netdev enp49s0f0np0 has no IPv4 "
                             "address?)")
    unchecked = check(fabric)
    assert unchecked["status"] == "skipped" and "no RoCE v2 IPv4 GID on mlx5_0:1" in unchecked["reason"]


def test_gpudirect_expected_on_a_node_without_hca_fails(gpudirect):
    got = check(rdma("h200_vm"), gpudirect(1, 0, driver=driver_version_text()), {"gpudirect": "dmabuf"})
    assert got["status"] == "failed"
    assert got["reason"] == ("GPUDirect RDMA: expected dmabuf; found none (not usable): no GPUDirect RDMA: the "
                             "node has no RDMA HCA.")
    anyway = check(rdma("h200_vm"), gpudirect(1, 0, driver=driver_version_text()), {"gpudirect": "any"})
    assert anyway["reason"].startswith("GPUDirect RDMA: expected dmabuf or peermem; found none (not usable)")


def test_container_without_gpu_or_hca_says_so_and_fails_a_profile_expecting_ports(gpudirect, tmp_path):
    empty = str(tmp_path / "container")
    os.makedirs(empty)
    fabric, direct = rdma(empty), gpudirect(0, 0)
    got = check(fabric, direct)
    assert got["status"] == "skipped"
    assert got["reason"] == ("no fabric profile (gpufleet_fabric_expect), nothing checked; found no InfiniBand/RoCE "
                             "HCA; GPUDirect RDMA none (not usable): no GPUDirect RDMA: the node has no NVIDIA GPU "
                             "and no RDMA HCA.")
    failed = check(fabric, direct, {"expect_ports": 8, "min_rate_gbps": 400})
    assert failed["status"] == "failed"
    assert failed["detail"]["problems"] == ["expected at least 8 RDMA port(s), found 0 (none under "
                                            "/sys/class/infiniband)"]
    only_rate = check(fabric, direct, {"min_rate_gbps": 400})
    assert only_rate["reason"] == "expected RDMA ports with min_rate_gbps, found none under /sys/class/infiniband"


def test_peermem_is_usable_only_once_loaded(gpudirect):
    fabric = rdma("ib_ndr_active")
    unloaded = gpudirect(8, 1, kernel=EL9, driver=PROPRIETARY, kallsyms=kallsyms_lines())
    got = check(fabric, unloaded, {"gpudirect": "peermem"})
    assert got["status"] == "failed" and got["detail"]["gpudirect"]["method"] == "peermem"
    assert got["reason"].startswith("GPUDirect RDMA: expected peermem; found peermem (not usable): nvidia-peermem: ")
    assert got["reason"].endswith("nvidia-peermem is not loaded (the interconnect role loads it).")
    loaded = gpudirect(8, 1, kernel=EL9, driver=PROPRIETARY, kallsyms=kallsyms_lines(),
                       modules="nvidia_peermem 16384 0 - Live 0x0\n")
    assert check(fabric, loaded, {"gpudirect": "peermem"})["status"] == "passed"
    assert check(fabric, loaded, {"gpudirect": "any"})["status"] == "passed"
    other = check(fabric, loaded, {"gpudirect": "dmabuf"})
    assert other["status"] == "failed" and other["reason"].startswith("GPUDirect RDMA: expected dmabuf; found peermem:")


def test_gpudirect_module_failure_is_not_usable_with_its_message(gpudirect):
    failed = gpudirect(1, 1, driver=driver_version_text(), preference="peermem")
    got = check(rdma("ib_ndr_active"), failed, {"gpudirect": "peermem"})
    assert got["status"] == "failed" and got["detail"]["gpudirect"]["usable"] is False
    assert "interconnect_gpudirect is peermem but nvidia-peermem cannot load here" in got["reason"]
    assert check(rdma("ib_ndr_active"), failed)["status"] == "skipped"


def test_unreadable_profile_fails():
    got = check(rdma("ib_ndr_active"), None, {"expect_port": 1, "min_rate_gbps": "fast", "gpudirect": "rdma"})
    assert got["status"] == "failed"
    assert got["detail"]["problems"] == [
        "unknown fabric profile key expect_port (known: expect_hcas, expect_ports, min_active_ports, expect_state, "
        "min_rate_gbps, link_layer, gpudirect, exclude_hcas)",
        "fabric profile gpudirect must be one of dmabuf, peermem, any, none, not 'rdma'",
        "fabric profile min_rate_gbps must be a number, not 'fast'"]


def test_empty_entries_are_no_profile():
    got = check(rdma("ib_ndr_active"), None, {"gpudirect": "none", "exclude_hcas": [], "expect_state": ""})
    assert got["status"] == "skipped" and got["detail"]["profile"] == {}


def test_excluded_hca_is_neither_reported_nor_counted():
    got = check(rdma("ib_port_down", exclude_hcas=["mlx5_1"]), None, {"expect_hcas": 1, "expect_state": "ACTIVE"})
    assert got["status"] == "passed" and got["detail"]["excluded"] == ["mlx5_1"]
    assert [p["name"] for p in got["detail"]["ports"]] == ["mlx5_0:1"]
