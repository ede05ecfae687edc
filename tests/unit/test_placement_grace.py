"""The placement map (module_utils/placement) on Grace nodes, from published nvidia-smi topo -m outputs.

tests/fixtures/nvidia-smi/topo-gh200-1gpu-4nic-r560.txt is one GH200 (NVIDIA's Aerial reference setup) and
topo-gb200-4gpu-8nic-r580.txt one GB200 compute tray (an OpenShift cluster); their sources are in their headers and in
tests/fixtures/nvidia-smi/README.md. They are read as test_placement.py reads the other topo -m fixtures: the GPUs and
HCAs topo -m shows, no sysfs path.

On Grace the GPU's memory is a NUMA node of its own without CPUs (topo -m's GPU NUMA ID, 1 on the GH200), and NUMA
Affinity names the Grace CPU node together with CPU-less nodes (0,2-17 on the GB200). Each GPU must get the Grace node
and that node's CPUs, never a node of GPU memory.
"""
import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi, placement

from conftest import fixture_parts

GH200 = "topo-gh200-1gpu-4nic-r560.txt"
GB200 = "topo-gb200-4gpu-8nic-r580.txt"

# The NUMA nodes of each machine as the kernel lists them under /sys/devices/system/node (node: cpulist), from the
# capture: the nodes its NUMA Affinity and GPU NUMA ID columns name, with CPUs only on the Grace nodes, as its CPU
# Affinity column shows them.
KERNEL_NODES = {
    # NUMA Affinity 0 with CPU Affinity 0-71; GPU NUMA ID 1, the GPU's memory.
    GH200: dict([(0, "0-71"), (1, "")]),
    # NUMA Affinity 0,2-17 with CPU Affinity 0-71 (GPU0, GPU1) and 1,18-33 with 72-143 (GPU2, GPU3).
    GB200: dict([(0, "0-71"), (1, "72-143")] + [(node, "") for node in range(2, 34)]),
}

# What a reader of each capture checks, per GPU: (Grace NUMA node, its CPUs, NVLink peers, nearest HCAs with their
# topo -m link). The GH200's GPU has no NVLink peer and all four ports at NODE; on the GB200 tray every GPU pair is
# NV18 and every NIC SYS, so all eight are equally near.
GB200_HCAS = [("mlx5_%d" % nic, "SYS") for nic in range(8)]
EXPECTED = {
    GH200: {
        0: (0, "0-71", [], [("mlx5_0", "NODE"), ("mlx5_1", "NODE"), ("mlx5_2", "NODE"), ("mlx5_3", "NODE")]),
    },
    GB200: {
        0: (0, "0-71", [1, 2, 3], GB200_HCAS),
        1: (0, "0-71", [0, 2, 3], GB200_HCAS),
        2: (1, "72-143", [0, 1, 3], GB200_HCAS),
        3: (1, "72-143", [0, 1, 2], GB200_HCAS),
    },
}


def _topo(name):
    return nvidia_smi.parse_topo_matrix(fixture_parts("nvidia-smi", name)[1])


def _inputs(topo):
    """The GPUs and HCAs topo -m shows, as build() takes them without sysfs (no PCI address, no NUMA node)."""
    gpus = [{"index": int(column[3:]), "uuid": "GPU-%s" % column[3:], "pci_bus_id": None} for column in topo["gpus"]]
    hcas = [{"name": topo["nic_names"].get(nic, nic), "pci_address": None, "numa_node": -1, "netdevs": [], "ports": []}
            for nic in topo["nics"]]
    return gpus, hcas


def _kernel_nodes(tmp_path, name):
    """read_numa_nodes() over a /sys/devices/system/node laid out as KERNEL_NODES[name]."""
    for node, cpus in KERNEL_NODES[name].items():
        path = tmp_path / "sys/devices/system/node" / ("node%d" % node)
        path.mkdir(parents=True)
        (path / "cpulist").write_text(cpus + "\n")
    return placement.read_numa_nodes(str(tmp_path))


def test_gh200_columns_as_printed():
    topo = _topo(GH200)
    assert topo["gpus"] == ["GPU0"]
    assert topo["columns"] == ["cpu_affinity", "numa_affinity", "gpu_numa_id"]
    assert [topo[column]["GPU0"] for column in topo["columns"]] == ["0-71", "0", "1"]
    assert topo["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert [topo["links"]["GPU0"][nic] for nic in topo["nics"]] == ["NODE"] * 4
    assert topo["links"]["NIC0"]["NIC1"] == "PIX" and topo["links"]["NIC2"]["NIC3"] == "PIX"


def test_gb200_columns_as_printed():
    topo = _topo(GB200)
    assert topo["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert topo["columns"] == ["cpu_affinity", "numa_affinity", "gpu_numa_id"]
    assert [topo["cpu_affinity"][gpu] for gpu in topo["gpus"]] == ["0-71", "0-71", "72-143", "72-143"]
    assert [topo["numa_affinity"][gpu] for gpu in topo["gpus"]] == ["0,2-17", "0,2-17", "1,18-33", "1,18-33"]
    assert [topo["gpu_numa_id"][gpu] for gpu in topo["gpus"]] == ["N/A"] * 4
    assert all(topo["links"][a][b] == "NV18" for a in topo["gpus"] for b in topo["gpus"] if a != b)
    assert topo["nic_names"] == dict(("NIC%d" % nic, "mlx5_%d" % nic) for nic in range(8))
    assert all(topo["links"][gpu][nic] == "SYS" for gpu in topo["gpus"] for nic in topo["nics"])


@pytest.mark.parametrize("name", [GH200, GB200])
def test_kernel_nodes_are_those_the_capture_names(name):
    """KERNEL_NODES holds no node the capture does not name, and the CPUs of exactly the CPU Affinity column."""
    topo = _topo(name)
    named = set()
    for gpu in topo["gpus"]:
        named.update(placement.parse_cpulist(topo["numa_affinity"][gpu]))
        if topo["gpu_numa_id"][gpu].isdigit():
            named.add(int(topo["gpu_numa_id"][gpu]))
    assert named == set(KERNEL_NODES[name])
    assert sorted(set(cpus for cpus in KERNEL_NODES[name].values() if cpus)) == \
        sorted(set(topo["cpu_affinity"][gpu] for gpu in topo["gpus"]))


@pytest.mark.parametrize("name", [GH200, GB200])
def test_each_gpu_gets_its_grace_node_cpus_nvlink_peers_and_nearest_hcas(tmp_path, name):
    topo = _topo(name)
    gpus, hcas = _inputs(topo)
    numa_nodes = _kernel_nodes(tmp_path, name)
    result = placement.build(gpus, {}, numa_nodes, hcas, topo=topo)
    got = dict((gpu["index"], (gpu["numa_node"], gpu["cpus"], gpu["nvlink_peers"],
                               [(hca["name"], hca["link"]) for hca in gpu["nearest_hcas"]]))
               for gpu in result["gpus"])
    assert got == EXPECTED[name]
    for gpu in result["gpus"]:
        # The CPU list is the capture's CPU Affinity cell, the node one of those its NUMA Affinity cell names.
        assert gpu["cpus"] == topo["cpu_affinity"]["GPU%d" % gpu["index"]]
        assert gpu["numa_node"] in placement.parse_cpulist(topo["numa_affinity"]["GPU%d" % gpu["index"]])
    assert result["gpu_reason"] is None


@pytest.mark.parametrize("name", [GH200, GB200])
def test_gpu_memory_nodes_do_not_become_cpu_lists(tmp_path, name):
    topo = _topo(name)
    gpus, hcas = _inputs(topo)
    result = placement.build(gpus, {}, _kernel_nodes(tmp_path, name), hcas, topo=topo)
    grace = sorted(node for node, cpus in KERNEL_NODES[name].items() if cpus)
    cpu_less = set(node for node, cpus in KERNEL_NODES[name].items() if not cpus)
    # The map lists the Grace nodes alone, each with its CPUs; every GPU sits on one of them.
    assert result["numa_nodes"] == [{"node": node, "cpus": KERNEL_NODES[name][node]} for node in grace]
    assert result["cpus"] == placement.format_cpulist(
        cpu for node in grace for cpu in placement.parse_cpulist(KERNEL_NODES[name][node]))
    for gpu in result["gpus"]:
        assert gpu["numa_node"] in grace and gpu["numa_node"] not in cpu_less
        gpu_numa_id = topo["gpu_numa_id"]["GPU%d" % gpu["index"]]
        if gpu_numa_id.isdigit():
            assert gpu["numa_node"] != int(gpu_numa_id)
        # Its own Grace's CPUs: on the two-Grace tray not every CPU of the node.
        assert gpu["cpus"] == KERNEL_NODES[name][gpu["numa_node"]]
        if len(grace) > 1:
            assert gpu["cpus"] != result["cpus"]


def test_gb200_without_the_kernels_node_list_names_no_node():
    """topo -m alone (no NUMA node list, as test_placement.py reads every topo fixture): a NUMA Affinity of several
    nodes does not say which of them holds the CPUs, so the GPU gets no node rather than a guessed one."""
    topo = _topo(GB200)
    gpus, hcas = _inputs(topo)
    result = placement.build(gpus, {}, [], hcas, topo=topo)
    assert [gpu["numa_node"] for gpu in result["gpus"]] == [None] * 4
    assert [gpu["nvlink_peers"] for gpu in result["gpus"]] == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]


def test_gh200_without_the_kernels_node_list_takes_the_single_numa_affinity():
    topo = _topo(GH200)
    gpus, hcas = _inputs(topo)
    result = placement.build(gpus, {}, [], hcas, topo=topo)
    assert result["gpus"][0]["numa_node"] == 0
    assert [hca["link"] for hca in result["gpus"][0]["nearest_hcas"]] == ["NODE"] * 4
