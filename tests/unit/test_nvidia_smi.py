"""Parsers in module_utils/nvidia_smi.py over real nvidia-smi outputs (tests/fixtures/nvidia-smi)."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi

from conftest import FIXTURES as ALL_FIXTURES, fixture_parts

FIXTURES = os.path.join(ALL_FIXTURES, "nvidia-smi")


def load(name):
    """Return the published text of a fixture, without its source header."""
    header, body = fixture_parts("nvidia-smi", name)
    assert header[0].startswith(("# source: http", "# source: captured with scripts/capture-gpu-node.sh")), \
        "%s does not name its source" % name
    return body


# name: (gpus, nics, affinity columns, {(a, b): code}, {gpu: (cpu affinity, numa affinity)}, nic legend)
TOPO_CASES = {
    "topo-asus-esc8000a-e12-4gpu-4nic-r575.txt": (
        4, 4, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "NIC0"): "NODE", ("GPU0", "NIC2"): "SYS", ("NIC0", "NIC1"): "PIX"},
        {"GPU0": ("0-31", "0"), "GPU2": ("32-63", "1")},
        {"NIC0": "mlx5_0", "NIC3": "mlx5_3"}),
    "topo-h200-8gpu-4nic-kvm-guest.txt": (
        8, 4, ["cpu_affinity"],
        {("GPU0", "NIC3"): "PXB", ("GPU1", "NIC3"): "PIX", ("GPU0", "NIC2"): "NODE", ("GPU0", "NIC0"): "SYS",
         ("GPU0", "GPU7"): "NV18"},
        {"GPU0": ("0-23", None), "GPU4": ("24-47", None)},
        {"NIC0": "mlx5_0", "NIC3": "mlx5_3"}),
    "topo-h200-1gpu-vm-r580.txt": (
        1, 0, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "GPU0"): "X"},
        {"GPU0": ("0-15", "0")},
        {}),
    "topo-hgx-h100-8gpu-8nic-r570.txt": (
        8, 8, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU3", "GPU5"): "NV18", ("GPU0", "NIC0"): "PIX", ("GPU4", "NIC0"): "SYS", ("NIC7", "NIC7"): "X"},
        {"GPU0": ("0-47,96-143", "0"), "GPU7": ("48-95,144-191", "1")},
        {"NIC0": "mlx5_0", "NIC7": "mlx5_7"}),
    "topo-h100-pcie-1gpu-1nic-r575.txt": (
        1, 1, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "NIC0"): "PHB", ("GPU0", "GPU0"): "X"},
        {"GPU0": ("0-251", "0")},
        {"NIC0": "mlx5_0"}),
    "topo-dgx-a100-8gpu-mlx5-columns.txt": (
        8, 12, ["cpu_affinity", "numa_affinity"],
        {("GPU0", "GPU7"): "NV12", ("GPU0", "mlx5_1"): "PXB", ("GPU7", "mlx5_9"): "PXB", ("mlx5_10", "mlx5_11"): "PIX"},
        {"GPU0": ("48-63,176-191", "3"), "GPU4": ("112-127,240-255", "7")},
        {}),
    "topo-dgx1-v100-8gpu-r440.txt": (
        8, 1, ["cpu_affinity"],
        {("GPU0", "GPU1"): "NV1", ("GPU0", "GPU3"): "NV2", ("GPU0", "GPU5"): "SYS", ("GPU2", "mlx5_0"): "PIX"},
        {"GPU0": ("0-11,24-35", None), "GPU7": ("12-23,36-47", None)},
        {}),
    "topo-v100-8gpu-indented.txt": (
        8, 1, ["cpu_affinity"],
        {("GPU0", "GPU1"): "NV2", ("GPU0", "GPU5"): "NODE", ("GPU7", "mlx5_0"): "NODE"},
        {"GPU0": ("0-23", None)},
        {}),
    "topo-rtx4090-8gpu-2nic-sys.txt": (
        8, 2, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "GPU7"): "SYS", ("GPU6", "NIC1"): "PHB", ("NIC0", "NIC1"): "PIX"},
        {"GPU0": ("0-55,112-167", "0"), "GPU4": ("56-111,168-223", "1")},
        {}),
    "topo-rtx5090-2gpu-phb.txt": (
        2, 0, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "GPU1"): "PHB"},
        {"GPU1": ("0-63", "0")},
        {}),
    "topo-a100-4gpu-nvlink-bridge-pairs.txt": (
        4, 2, ["cpu_affinity", "numa_affinity"],
        {("GPU0", "GPU1"): "NV12", ("GPU1", "GPU2"): "SYS", ("GPU2", "GPU3"): "NODE", ("GPU3", "mlx5_0"): "SYS"},
        {"GPU0": ("0-27,56-83", "0"), "GPU3": ("28-55,84-111", "1")},
        {}),
    "topo-rtx4090-5gpu-nonic-r580.txt": (
        5, 0, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "GPU1"): "SYS", ("GPU3", "GPU4"): "PHB", ("GPU1", "GPU3"): "NODE"},
        {"GPU0": ("8-15,24-31", "1"), "GPU1": ("0-7,16-23", "0")},
        {}),
    "topo-h100-4gpu-nv6-4nic.txt": (
        4, 4, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "GPU3"): "NV6", ("GPU2", "NIC2"): "PIX", ("GPU2", "NIC3"): "SYS"},
        {"GPU0": ("6,14,22,30", "3"), "GPU3": ("5,13,21,29", "5")},
        {}),
    "topo-a100-4gpu-nv4-4nic.txt": (
        4, 4, ["cpu_affinity", "numa_affinity"],
        {("GPU1", "GPU2"): "NV4", ("GPU1", "NIC1"): "PXB"},
        {"GPU0": ("0", "0-1")},
        {}),
    "topo-gh200-1gpu-4nic-r560.txt": (
        1, 4, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "NIC0"): "NODE", ("GPU0", "NIC3"): "NODE", ("NIC0", "NIC1"): "PIX", ("NIC1", "NIC2"): "NODE",
         ("NIC2", "NIC3"): "PIX"},
        {"GPU0": ("0-71", "0")},
        {"NIC0": "mlx5_0", "NIC3": "mlx5_3"}),
    "topo-gb200-4gpu-8nic-r580.txt": (
        4, 8, ["cpu_affinity", "numa_affinity", "gpu_numa_id"],
        {("GPU0", "GPU3"): "NV18", ("GPU1", "GPU2"): "NV18", ("GPU0", "NIC0"): "SYS", ("GPU3", "NIC7"): "SYS",
         ("NIC2", "NIC3"): "PIX", ("NIC6", "NIC7"): "PIX", ("NIC0", "NIC1"): "SYS"},
        {"GPU0": ("0-71", "0,2-17"), "GPU3": ("72-143", "1,18-33")},
        {"NIC0": "mlx5_0", "NIC7": "mlx5_7"}),
}


def test_every_topo_fixture_is_covered():
    on_disk = sorted(name for name in os.listdir(FIXTURES) if name.startswith("topo-"))
    assert on_disk == sorted(TOPO_CASES)


@pytest.mark.parametrize("name", sorted(TOPO_CASES))
def test_topo_matrix(name):
    gpus, nics, columns, links, affinities, legend = TOPO_CASES[name]
    topo = nvidia_smi.parse_topo_matrix(load(name))
    assert len(topo["gpus"]) == gpus
    assert len(topo["nics"]) == nics
    assert topo["devices"] == topo["gpus"] + topo["nics"]
    assert topo["columns"] == columns
    for (first, second), code in links.items():
        assert topo["links"][first][second] == code
        assert topo["links"][second][first] == code
    for device in topo["devices"]:
        assert topo["links"][device][device] == "X"
    for gpu, (cpu, numa) in affinities.items():
        assert topo["cpu_affinity"][gpu] == cpu
        assert topo["numa_affinity"][gpu] == numa
    if legend:
        for nic, device in legend.items():
            assert topo["nic_names"][nic] == device
        assert len(topo["nic_names"]) == nics
    else:
        assert topo["nic_names"] == {}


def test_gpu_numa_id_column_is_read():
    topo = nvidia_smi.parse_topo_matrix(load("topo-hgx-h100-8gpu-8nic-r570.txt"))
    assert topo["gpu_numa_id"]["GPU0"] == "N/A"
    old = nvidia_smi.parse_topo_matrix(load("topo-dgx1-v100-8gpu-r440.txt"))
    assert old["gpu_numa_id"]["GPU0"] is None and old["numa_affinity"]["GPU0"] is None


def test_tabs_respaced_and_indented_give_the_same_matrix():
    text = load("topo-a100-4gpu-nvlink-bridge-pairs.txt")
    respaced = "\n".join("    " + "  ".join(line.split("\t")) for line in text.splitlines())
    assert nvidia_smi.parse_topo_matrix(respaced)["links"] == nvidia_smi.parse_topo_matrix(text)["links"]


def test_prompt_fence_and_ansi_underline_are_ignored():
    text = load("topo-rtx5090-2gpu-phb.txt")
    wrapped = "$ nvidia-smi topo -m\n```\n\x1b[4m" + text.replace("\n", "\x1b[0m\n", 1) + "```\n"
    topo = nvidia_smi.parse_topo_matrix(wrapped)
    assert topo["links"]["GPU0"]["GPU1"] == "PHB"


@pytest.mark.parametrize("text", ["", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                                  "        GPU0    GPU1\nGPU0     X      NV4\n"])
def test_no_or_broken_matrix_raises(text):
    with pytest.raises(ValueError):
        nvidia_smi.parse_topo_matrix(text)


def test_nvlink_status_counts_active_and_inactive_links():
    status = nvidia_smi.parse_nvlink_status(load("nvlink-s-v100-inactive-links.txt"))
    assert len(status) == 1
    gpu = status[0]
    assert gpu["index"] == 3
    assert gpu["name"] == "Tesla V100-SXM2-32GB"
    assert gpu["links_active"] == 4
    assert gpu["links_inactive"] == 2
    assert gpu["link_speeds_gbps"]["0"] == 25.781
    assert gpu["link_speeds_gbps"]["5"] is None


def test_nvlink_status_empty_output():
    assert nvidia_smi.parse_nvlink_status("") == []


def test_query_gpu_captured_h200():
    gpus = nvidia_smi.parse_query_gpu(load("query-gpu-h200-1gpu-vm-r580.txt"))
    assert gpus == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-8623a53b-6368-076c-7ffe-844bb35674a7",
                     "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 143771, "driver_version": "580.159.04"}]


def test_nvlink_status_captured_without_nvlink():
    # nvidia-smi nvlink -s on a GPU that shows no NVLink: exit 0, nothing printed.
    assert load("nvlink-s-h200-1gpu-vm-r580.txt") == ""
    assert nvidia_smi.parse_nvlink_status(load("nvlink-s-h200-1gpu-vm-r580.txt")) == []


# Edge cases the capture does not show (a header line, units left on, a comma inside a name), in the
# documented --format=csv,noheader,nounits layout.
def test_query_gpu_rows():
    text = ("0, NVIDIA H100 80GB HBM3, GPU-0, 00000000:18:00.0, 81559, 570.133.20\n"
            "1, NVIDIA H100, PCIe, GPU-1, 00000000:2A:00.0, 81559 MiB, 570.133.20\n")
    gpus = nvidia_smi.parse_query_gpu("index, name, uuid, pci.bus_id, memory.total, driver_version\n" + text)
    assert [gpu["index"] for gpu in gpus] == [0, 1]
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpus[1]["name"] == "NVIDIA H100, PCIe"
    assert gpus[1]["pci_bus_id"] == "00000000:2A:00.0"
    assert gpus[1]["memory_total_mib"] == 81559
    assert gpus[0]["driver_version"] == "570.133.20"


def test_query_gpu_rejects_other_output():
    with pytest.raises(ValueError):
        nvidia_smi.parse_query_gpu("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


# name: [(gpu index, name, active links, inactive links, GB/s of every active link, all_links_inactive)]
NVLINK_CASES = {
    "nvlink-s-v100-inactive-links.txt": [(3, "Tesla V100-SXM2-32GB", 4, 2, 25.781, False)],
    "nvlink-s-h100-sxm-18links-26g.txt": [(0, "NVIDIA H100 80GB HBM3", 18, 0, 26.562, False),
                                          (1, "NVIDIA H100 80GB HBM3", 18, 0, 26.562, False)],
    # The poster elided GPU 1 after two links.
    "nvlink-s-gb200-18links-53g.txt": [(0, "NVIDIA GB200", 18, 0, 53.125, False),
                                       (1, "NVIDIA GB200", 2, 0, 53.125, False)],
    "nvlink-s-b200-gpu-all-links-inactive.txt": [(2, "NVIDIA B200", 0, 0, None, True)],
    "nvlink-s-h200-1gpu-vm-r580.txt": [],
    # GPU lines without a UUID part; the author cut GPU 1-6 ("[snip]").
    "nvlink-s-dgx1-v100-no-uuid.txt": [(0, "Tesla V100-SXM2-32GB", 6, 0, 25.781, False),
                                       (7, "Tesla V100-SXM2-32GB", 6, 0, 25.781, False)],
    # Whole "25 GB/s"; the reporter elided the rest after GPU 2's first link.
    "nvlink-s-a100-sxm4-12links-25g-whole.txt": [(0, "NVIDIA A100-SXM4-80GB", 12, 0, 25.0, False),
                                                 (1, "NVIDIA A100-SXM4-80GB", 12, 0, 25.0, False),
                                                 (2, "NVIDIA A100-SXM4-80GB", 1, 0, 25.0, False)],
    "nvlink-s-rtx2080ti-i2-2links.txt": [(2, "GeForce RTX 2080 Ti", 2, 0, 25.781, False)],
}


def test_every_nvlink_fixture_is_covered():
    on_disk = sorted(name for name in os.listdir(FIXTURES) if name.startswith("nvlink-s-"))
    assert on_disk == sorted(NVLINK_CASES)


@pytest.mark.parametrize("name", sorted(NVLINK_CASES))
def test_nvlink_status_layouts(name):
    status = nvidia_smi.parse_nvlink_status(load(name))
    expected = NVLINK_CASES[name]
    assert [(gpu["index"], gpu["name"], gpu["links_active"], gpu["links_inactive"], gpu["all_links_inactive"])
            for gpu in status] == [(e[0], e[1], e[2], e[3], e[5]) for e in expected]
    for gpu, case in zip(status, expected):
        speeds = [speed for speed in gpu["link_speeds_gbps"].values() if speed is not None]
        assert speeds == [case[4]] * case[2]
        assert len(gpu["link_speeds_gbps"]) == case[2] + case[3]


def test_nvlink_prompt_line_is_not_a_gpu():
    status = nvidia_smi.parse_nvlink_status(load("nvlink-s-h100-sxm-18links-26g.txt"))
    assert [gpu["uuid"] for gpu in status] == ["GPU-4039dfe4-0c97-4b1e-683e-eb7d42699053",
                                               "GPU-dd3b269a-8f3a-d2d5-1518-2713ba03fcf7"]
    assert sorted(status[0]["link_speeds_gbps"], key=int) == [str(link) for link in range(18)]


def test_nvlink_status_gpu_lines_without_uuid():
    status = nvidia_smi.parse_nvlink_status(load("nvlink-s-dgx1-v100-no-uuid.txt"))
    assert [(gpu["index"], gpu["name"], gpu["uuid"]) for gpu in status] == [
        (0, "Tesla V100-SXM2-32GB", None), (7, "Tesla V100-SXM2-32GB", None)]
    assert status[1]["link_speeds_gbps"] == dict((str(link), 25.781) for link in range(6))


def test_nvlink_status_uuid_kept_next_to_the_no_uuid_layout():
    a100 = nvidia_smi.parse_nvlink_status(load("nvlink-s-a100-sxm4-12links-25g-whole.txt"))
    assert [gpu["uuid"] for gpu in a100] == ["GPU-ff8a40d4-abc6-08d1-f939-15848b5d4e05",
                                             "GPU-0c512562-871f-8257-6187-b5ae1b986d5e",
                                             "GPU-f4fb3d24-8773-b6b6-ae47-af7b37f5137d"]
    assert a100[0]["link_speeds_gbps"]["11"] == 25.0
    rtx = nvidia_smi.parse_nvlink_status(load("nvlink-s-rtx2080ti-i2-2links.txt"))
    assert rtx[0]["uuid"] == "GPU-6c41afdf-d8aa-ed9b-24a2-fa90c471fda0"
    assert rtx[0]["link_speeds_gbps"] == {"0": 25.781, "1": 25.781}


def test_nvlink_capabilities_lines_are_not_link_states():
    # nvidia-smi nvlink --capabilities: "Link N, P2P is supported: true" says nothing of a link being up.
    status = nvidia_smi.parse_nvlink_status(load("nvlink-c-dgx1-v100-capabilities.txt"))
    assert [(gpu["index"], gpu["uuid"], gpu["links_active"], gpu["links_inactive"], gpu["link_speeds_gbps"])
            for gpu in status] == [(0, None, 0, 0, {})]
