"""The placement map (module_utils/placement, module placement_facts) on recorded sysfs trees and nvidia-smi outputs.

tests/fixtures/sysfs/h200_vm and the nvidia-smi files of the same H200 VM were captured on that machine
(scripts/capture-gpu-node.sh); tests/fixtures/nvidia-smi/topo-dgx-a100-8gpu-mlx5-columns.txt is a published DGX A100
output. Their sources are in the fixtures' headers and READMEs.
"""
import json
import os
import shutil

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi, placement, sysfs
from ansible_collections.gpufleet.cluster.plugins.modules import placement_facts
from conftest import FIXTURES, fixture_parts
from module_harness import Fail, patch_module, run_main

H200_QUERY = fixture_parts("nvidia-smi", "query-gpu-h200-1gpu-vm-r580.txt")[1]
H200_TOPO = fixture_parts("nvidia-smi", "topo-h200-1gpu-vm-r580.txt")[1]
DGX_A100_TOPO = fixture_parts("nvidia-smi", "topo-dgx-a100-8gpu-mlx5-columns.txt")[1]


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8-11", [0, 1, 2, 3, 8, 9, 10, 11]),
    ("5", [5]),
    ("", []),
    ("0-1,1-2", [0, 1, 2]),
    ("48-63,176-191", list(range(48, 64)) + list(range(176, 192))),
])
def test_cpulists_read_and_written_as_the_kernel_writes_them(text, cpus):
    assert placement.parse_cpulist(text) == cpus
    assert placement.parse_cpulist(placement.format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("text", ["0-", "a", "3-1", "0,,x", "1 2"])
def test_a_cpulist_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        placement.parse_cpulist(text)


def test_format_cpulist_joins_ranges():
    assert placement.format_cpulist([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert placement.format_cpulist([]) == ""


@pytest.mark.parametrize("bus_id, address", [
    ("00000000:19:00.0", "0000:19:00.0"),
    ("00000001:9B:00.1", "0001:9b:00.1"),
    ("0000:1a:00.0", "0000:1a:00.0"),
    ("N/A", None),
    ("", None),
])
def test_nvidia_smi_bus_ids_become_sysfs_addresses(bus_id, address):
    assert placement.pci_address(bus_id) == address


# PCI chains as sysfs shows them: root bus, bridges (root port, switch ports), the device.
SWITCH = ["pci0000:15", "0000:15:01.0", "0000:16:00.0"]


@pytest.mark.parametrize("chain_a, chain_b, numa_a, numa_b, expected", [
    # Below one switch: root port, upstream port, then each device's own downstream port.
    (SWITCH + ["0000:17:00.0", "0000:19:00.0"], SWITCH + ["0000:17:01.0", "0000:1a:00.0"], 0, 0, "PIX"),
    # Two levels of switches on one side.
    (SWITCH + ["0000:17:00.0", "0000:18:00.0", "0000:18:10.0", "0000:19:00.0"],
     SWITCH + ["0000:17:01.0", "0000:1a:00.0"], 0, 0, "PXB"),
    # Same root bus, different root ports: through the host bridge.
    (["pci0000:15", "0000:15:01.0", "0000:19:00.0"], ["pci0000:15", "0000:15:02.0", "0000:1a:00.0"], 0, 0, "PHB"),
    # Devices straight on the root bus (a VM).
    (["pci0000:00", "0000:00:06.0"], ["pci0000:00", "0000:00:07.0"], None, None, "PHB"),
    # Different root buses, one NUMA node; different NUMA nodes.
    (["pci0000:15", "0000:15:01.0", "0000:19:00.0"], ["pci0000:35", "0000:35:01.0", "0000:3a:00.0"], 0, 0, "NODE"),
    (["pci0000:15", "0000:15:01.0", "0000:19:00.0"], ["pci0000:b5", "0000:b5:01.0", "0000:ba:00.0"], 0, 1, "SYS"),
    # No NUMA node for either: one node.
    (["pci0000:15", "0000:15:01.0", "0000:19:00.0"], ["pci0000:35", "0000:35:01.0", "0000:3a:00.0"], None, None,
     "NODE"),
    # No chain: the NUMA nodes alone; neither: unknown.
    (None, ["pci0000:35", "0000:35:01.0", "0000:3a:00.0"], 1, 0, "SYS"),
    (None, None, 1, 1, "NODE"),
    (None, None, None, 0, None),
])
def test_link_class_follows_the_topo_legend(chain_a, chain_b, numa_a, numa_b, expected):
    pair = {"a": (chain_a, numa_a), "b": (chain_b, numa_b)}
    for first, second in (("a", "b"), ("b", "a")):  # the same pair both ways round
        assert placement.link_class(pair[first][0], pair[second][0], pair[first][1], pair[second][1]) == expected


def _tree(tmp_path, name):
    root = str(tmp_path / name)
    shutil.copytree(os.path.join(FIXTURES, "sysfs", name), root, symlinks=True)
    return root


def test_captured_h200_vm_gives_one_gpu_on_its_local_cpus(tmp_path):
    """The VM's kernel gives the GPU no NUMA node (-1): topo -m's NUMA Affinity (0) stands in; its CPUs are the
    device's local_cpulist. No HCA, no NVLink peer."""
    root = _tree(tmp_path, "h200_vm")
    gpus = nvidia_smi.parse_query_gpu(H200_QUERY)
    address = placement.pci_address(gpus[0]["pci_bus_id"])
    locality = placement.read_pci_locality(root, placement.gpu_device(address))
    assert locality == {"numa_node": None, "cpus": list(range(16)), "chain": None}
    result = placement.build(gpus, {address: locality}, placement.read_numa_nodes(root), sysfs.read_infiniband(root),
                             topo=nvidia_smi.parse_topo_matrix(H200_TOPO))
    assert result["gpus"] == [{
        "index": 0, "uuid": "GPU-8623a53b-6368-076c-7ffe-844bb35674a7", "pci_address": "0000:00:06.0",
        "numa_node": 0, "cpus": "0-15", "nearest_hcas": [], "nvlink_peers": []}]
    assert result["hcas"] == [] and result["gpu_reason"] is None


def test_published_dgx_a100_topology_gives_nvlink_peers_and_the_hcas_behind_each_gpus_switch():
    """Without sysfs paths (none recorded for this machine) the GPU-HCA link is topo -m's; every GPU has its 7
    NVLink peers, its two HCAs at PXB and its NUMA node and CPUs from topo -m's affinity columns."""
    topo = nvidia_smi.parse_topo_matrix(DGX_A100_TOPO)
    gpus = [{"index": i, "uuid": "GPU-%d" % i, "pci_bus_id": None} for i in range(8)]
    hcas = [{"name": "mlx5_%d" % i, "pci_address": None, "numa_node": -1, "netdevs": [], "ports": []}
            for i in range(12)]
    numa_nodes = [{"node": 1, "cpus": placement.parse_cpulist("16-31,144-159")},
                  {"node": 3, "cpus": placement.parse_cpulist("48-63,176-191")},
                  {"node": 5, "cpus": placement.parse_cpulist("80-95,208-223")},
                  {"node": 7, "cpus": placement.parse_cpulist("112-127,240-255")}]
    result = placement.build(gpus, {}, numa_nodes, hcas, topo=topo)
    by_index = dict((gpu["index"], gpu) for gpu in result["gpus"])
    assert [by_index[i]["nvlink_peers"] for i in range(8)] == [[j for j in range(8) if j != i] for i in range(8)]
    assert [[hca["name"] for hca in by_index[i]["nearest_hcas"]] for i in range(8)] == [
        ["mlx5_0", "mlx5_1"], ["mlx5_0", "mlx5_1"], ["mlx5_2", "mlx5_3"], ["mlx5_2", "mlx5_3"],
        ["mlx5_6", "mlx5_7"], ["mlx5_6", "mlx5_7"], ["mlx5_8", "mlx5_9"], ["mlx5_8", "mlx5_9"]]
    assert {hca["link"] for i in range(8) for hca in by_index[i]["nearest_hcas"]} == {"PXB"}
    assert [by_index[i]["numa_node"] for i in range(8)] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert by_index[0]["cpus"] == "48-63,176-191" and by_index[4]["cpus"] == "112-127,240-255"


def test_recorded_hca_tree_with_a_gpu_behind_the_same_root_port_is_pix(tmp_path):
    """ib_ndr_active's HCA (0000:1a:00.0 below root port 0000:15:01.0) and a GPU added beside it below a switch
    at that root port: the GPU's nearest HCA is mlx5_0 with its active port 1, at PIX."""
    root = _tree(tmp_path, "ib_ndr_active")
    gpu_dir = os.path.join(root, "sys/devices/pci0000:15/0000:15:01.0/0000:19:00.0")
    os.makedirs(gpu_dir)
    for name, value in (("numa_node", "0"), ("local_cpulist", "0-31"), ("vendor", "0x10de")):
        with open(os.path.join(gpu_dir, name), "w") as handle:
            handle.write(value + "\n")
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    os.symlink("../../../devices/pci0000:15/0000:15:01.0/0000:19:00.0",
               os.path.join(root, "sys/bus/pci/devices/0000:19:00.0"))
    hcas = sysfs.read_infiniband(root)
    gpu_locality = placement.read_pci_locality(root, placement.gpu_device("0000:19:00.0"))
    assert gpu_locality["chain"] == ["pci0000:15", "0000:15:01.0", "0000:19:00.0"]
    hca_locality = placement.read_pci_locality(root, placement.hca_device("mlx5_0"))
    assert hca_locality["chain"] == ["pci0000:15", "0000:15:01.0", "0000:1a:00.0"]
    result = placement.build([{"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:19:00.0"}],
                             {"0000:19:00.0": gpu_locality}, [{"node": 0, "cpus": list(range(64))}], hcas,
                             hca_localities={"mlx5_0": hca_locality})
    assert result["gpus"][0]["nearest_hcas"] == [
        {"name": "mlx5_0", "link": "PIX", "netdevs": ["ibp26s0"], "ports": [1], "active_ports": [1]}]
    assert result["gpus"][0]["cpus"] == "0-31"
    assert result["hcas"] == [{"name": "mlx5_0", "pci_address": "0000:1a:00.0", "numa_node": 0}]


def test_numa_nodes_from_sysfs_and_the_online_cpus_without_numa(tmp_path):
    base = tmp_path / "sys/devices/system"
    for node, cpus in (("node0", "0-3"), ("node1", "4-7"), ("node2", "")):
        (base / "node" / node).mkdir(parents=True)
        (base / "node" / node / "cpulist").write_text(cpus + "\n")
    (base / "node" / "possible").write_text("0-2\n")
    assert placement.read_numa_nodes(str(tmp_path)) == [
        {"node": 0, "cpus": [0, 1, 2, 3]}, {"node": 1, "cpus": [4, 5, 6, 7]}]
    flat = tmp_path / "flat"
    (flat / "sys/devices/system/cpu").mkdir(parents=True)
    (flat / "sys/devices/system/cpu/online").write_text("0-15\n")
    assert placement.read_numa_nodes(str(flat)) == [{"node": 0, "cpus": list(range(16))}]


def test_module_on_the_captured_h200_vm(monkeypatch, tmp_path):
    root = _tree(tmp_path, "h200_vm")
    calls = []
    outputs = {"--query-gpu": (0, H200_QUERY, ""), "topo": (0, H200_TOPO, "")}

    def run_command(module, args, **kwargs):
        calls.append(args[1])
        return outputs[args[1].split("=")[0]]

    patch_module(monkeypatch, run_command)
    result = run_main(placement_facts.main, {"root": root, "gpu_count": 1})
    fact = result["ansible_facts"]["gpufleet_placement"]
    assert result["changed"] is False
    assert calls == ["--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version", "topo"]
    assert [(gpu["index"], gpu["pci_address"], gpu["cpus"]) for gpu in fact["gpus"]] == [(0, "0000:00:06.0", "0-15")]
    json.dumps(fact)


def test_module_without_gpus_runs_no_nvidia_smi_and_says_why(monkeypatch, tmp_path):
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-1\n")
    patch_module(monkeypatch, lambda module, args, **kwargs: pytest.fail("ran %s" % args))
    fact = run_main(placement_facts.main, {"root": str(tmp_path), "gpu_count": 0})["ansible_facts"]["gpufleet_placement"]
    assert fact == {"version": 1, "numa_nodes": [{"node": 0, "cpus": "0-1"}], "cpus": "0-1", "gpus": [],
                    "gpu_reason": "no NVIDIA GPU on the PCI bus", "hcas": []}


def test_module_with_a_failing_nvidia_smi_gives_a_cpu_map_with_the_reason(monkeypatch, tmp_path):
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-3\n")
    patch_module(monkeypatch, lambda module, args, **kwargs: (
        9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", ""))
    fact = run_main(placement_facts.main, {"root": str(tmp_path), "gpu_count": 2})["ansible_facts"]["gpufleet_placement"]
    assert fact["gpus"] == [] and fact["cpus"] == "0-3"
    assert fact["gpu_reason"].startswith("nvidia-smi failed (rc=9): NVIDIA-SMI has failed")


def test_module_refuses_query_output_it_cannot_read(monkeypatch, tmp_path):
    patch_module(monkeypatch, lambda module, args, **kwargs: (0, "garbage line\n", ""))
    failure = run_main(placement_facts.main, {"root": str(tmp_path), "gpu_count": 1}, expect=Fail)
    assert "cannot read nvidia-smi --query-gpu output" in failure["msg"]


TOPO_FIXTURES = sorted(name for name in os.listdir(os.path.join(FIXTURES, "nvidia-smi")) if name.startswith("topo-"))


@pytest.mark.parametrize("name", TOPO_FIXTURES)
def test_every_recorded_topology_gives_symmetric_nvlink_peers_and_the_closest_hcas(name):
    """On every topo -m fixture, with the GPUs and HCAs it shows and no sysfs path: each GPU's NVLink peers are
    those its row marks NV#, symmetric; its nearest HCAs are exactly the HCAs at its row's best link class; its NUMA
    node is topo -m's NUMA Affinity where that is one node."""
    topo = nvidia_smi.parse_topo_matrix(fixture_parts("nvidia-smi", name)[1])
    indexes = [int(column[3:]) for column in topo["gpus"]]
    gpus = [{"index": index, "uuid": "GPU-%d" % index, "pci_bus_id": None} for index in indexes]
    names = [topo.get("nic_names", {}).get(nic, nic) for nic in topo.get("nics", [])]
    hcas = [{"name": hca, "pci_address": None, "numa_node": -1, "netdevs": [], "ports": []} for hca in names]
    result = placement.build(gpus, {}, [], hcas, topo=topo)
    assert [gpu["index"] for gpu in result["gpus"]] == sorted(indexes)
    peers = dict((gpu["index"], gpu["nvlink_peers"]) for gpu in result["gpus"])
    for gpu in result["gpus"]:
        row = topo["links"]["GPU%d" % gpu["index"]]
        assert gpu["nvlink_peers"] == sorted(int(c[3:]) for c, code in row.items()
                                             if c.startswith("GPU") and code.startswith("NV"))
        assert all(gpu["index"] in peers[peer] for peer in gpu["nvlink_peers"])
        codes = dict((topo.get("nic_names", {}).get(nic, nic), row.get(nic)) for nic in topo.get("nics", []))
        known = dict((hca, code) for hca, code in codes.items() if code in placement.LINK_ORDER)
        best = min((placement.link_rank(code) for code in known.values()), default=None)
        assert sorted(hca["name"] for hca in gpu["nearest_hcas"]) == sorted(
            hca for hca, code in known.items() if placement.link_rank(code) == best)
        affinity = str(topo.get("numa_affinity", {}).get("GPU%d" % gpu["index"]) or "")
        assert gpu["numa_node"] == (int(affinity) if affinity.isdigit() else None)


# Two-socket machines whose sysfs trees were laid out from their published lspci -tv / lstopo, numactl and
# nvidia-smi topo -m (tests/fixtures/sysfs/README.md says what was recorded and what derived). GPU indexes follow
# PCI bus order, as nvidia-smi numbers them by default.
MULTI_NUMA = {
    "asus_esc8000a_e12": ("topo-asus-esc8000a-e12-4gpu-4nic-r575.txt",
                          ["0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0"],
                          [{"node": 0, "cpus": "0-31"}, {"node": 1, "cpus": "32-63"}]),
    "h200_kvm_guest": ("topo-h200-8gpu-4nic-kvm-guest.txt",
                       ["0000:23:00.0", "0000:27:00.0", "0000:43:00.0", "0000:47:00.0",
                        "0000:69:00.0", "0000:6d:00.0", "0000:83:00.0", "0000:87:00.0"],
                       [{"node": 0, "cpus": "0-23"}, {"node": 1, "cpus": "24-47"}]),
}


def _query(addresses):
    return "".join("%d, NVIDIA GPU, GPU-%d, 0000%s, 81559, 575.51.03\n" % (index, index, address)
                   for index, address in enumerate(addresses))


@pytest.mark.parametrize("tree", sorted(MULTI_NUMA))
def test_two_socket_trees_give_the_links_topo_m_printed_on_that_machine(monkeypatch, tmp_path, tree):
    """Every GPU-HCA link worked out from the PCI paths equals the cell of the machine's own topo -m; each GPU gets
    its NUMA node's CPUs and the HCAs at its best link; the NUMA nodes are those numactl showed."""
    topo_name, addresses, nodes = MULTI_NUMA[tree]
    root = _tree(tmp_path, tree)
    topo_text = fixture_parts("nvidia-smi", topo_name)[1]
    topo = nvidia_smi.parse_topo_matrix(topo_text)
    hcas = sysfs.read_infiniband(root)
    for index, address in enumerate(addresses):
        gpu = placement.read_pci_locality(root, placement.gpu_device(address))
        assert gpu["chain"] is not None and gpu["chain"][-1] == address
        for column in topo["nics"]:
            hca = topo["nic_names"][column]
            other = placement.read_pci_locality(root, placement.hca_device(hca))
            assert placement.link_class(gpu["chain"], other["chain"], gpu["numa_node"], other["numa_node"]) == \
                topo["links"]["GPU%d" % index][column], (address, hca)

    outputs = {"--query-gpu": (0, _query(addresses), ""), "topo": (0, topo_text, "")}
    patch_module(monkeypatch, lambda module, args, **kwargs: outputs[args[1].split("=")[0]])
    fact = run_main(placement_facts.main, {"root": root, "gpu_count": len(addresses)})["ansible_facts"]["gpufleet_placement"]
    assert fact["numa_nodes"] == nodes
    cpus_of = dict((node["node"], node["cpus"]) for node in nodes)
    for gpu in fact["gpus"]:
        row = topo["links"]["GPU%d" % gpu["index"]]
        codes = dict((topo["nic_names"][column], row[column]) for column in topo["nics"])
        best = min(placement.link_rank(code) for code in codes.values())
        assert sorted(hca["name"] for hca in gpu["nearest_hcas"]) == sorted(
            name for name, code in codes.items() if placement.link_rank(code) == best)
        assert gpu["cpus"] == cpus_of[gpu["numa_node"]]
        assert gpu["nvlink_peers"] == sorted(int(c[3:]) for c, code in row.items() if code.startswith("NV"))
    # The numbers a reader would check by hand: on the guest GPU1 shares a switch with mlx5_3 (PIX) and GPU0 sits
    # one switch up (PXB); on the ASUS server GPU0's nearest are its node's two ports, through the host bridges.
    by_index = dict((gpu["index"], gpu) for gpu in fact["gpus"])
    if tree == "h200_kvm_guest":
        assert [(h["name"], h["link"]) for h in by_index[1]["nearest_hcas"]] == [("mlx5_3", "PIX")]
        assert [(h["name"], h["link"]) for h in by_index[0]["nearest_hcas"]] == [("mlx5_3", "PXB")]
        assert by_index[0]["numa_node"] == 0 and by_index[7]["numa_node"] == 1
    else:
        assert [(h["name"], h["link"]) for h in by_index[0]["nearest_hcas"]] == [("mlx5_0", "NODE"), ("mlx5_1", "NODE")]
        assert by_index[2]["numa_node"] == 1 and by_index[2]["cpus"] == "32-63"
