"""Expectation rules, profiles and the summary line in module_utils/topology_policy.py."""
import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi
from ansible_collections.gpufleet.cluster.plugins.module_utils import topology_policy as policy

from test_nvidia_smi import load


def machine(fixture, name, driver="570.133.20"):
    """A topology from a real topo fixture, with the GPU name the same source reports."""
    topo = nvidia_smi.parse_topo_matrix(load(fixture))
    gpus = [{"index": int(gpu[3:]), "name": name, "uuid": None, "pci_bus_id": None, "memory_total_mib": None,
             "driver_version": driver} for gpu in topo["gpus"]]
    return policy.assemble(gpus, topo)


@pytest.fixture
def h100():
    return machine("topo-hgx-h100-8gpu-8nic-r570.txt", "NVIDIA H100 80GB HBM3")


@pytest.fixture
def dgx1():
    return machine("topo-dgx1-v100-8gpu-r440.txt", "Tesla V100-SXM2-16GB", driver="440.33.01")


@pytest.mark.parametrize("code, expected, ok", [
    ("NV18", "NV18", True), ("NV12", "NV18", False), ("NV2", "NV", True), ("PIX", "NV", False),
    ("NV1", "SYS", True), ("PIX", "PXB", True), ("PXB", "PIX", False), ("NODE", "PHB", False),
    ("SYS", "NODE", False), ("SOC", "SYS", True), (None, "SYS", False),
])
def test_link_order(code, expected, ok):
    assert policy.link_meets(code, expected) is ok


def test_h100_meets_its_profile(h100):
    expectations = policy.resolve_expectations("hgx-h100-8")
    assert policy.check(h100, expectations) == []
    assert h100["summary"] == "8x NVIDIA H100 80GB HBM3, all pairs NV18, 8 NICs at PIX"


def test_a100_profile_on_h100_names_model_and_nothing_else(h100):
    violations = policy.check(h100, policy.resolve_expectations("hgx-a100-8"))
    assert violations == ["GPU%d: model 'NVIDIA H100 80GB HBM3' does not match 'A100'" % i for i in range(8)]


def test_all_pairs_link_one_line_per_pair(dgx1):
    violations = policy.check(dgx1, {"all_pairs_link": "NV"})
    assert "GPU0<->GPU5: SYS, expected NV" in violations
    assert "GPU0<->GPU1: NV1, expected NV" not in violations
    # DGX-1 hybrid cube-mesh: each GPU has 3 non-NVLink peers -> 8*3/2 pairs
    assert len(violations) == 12


def test_nvlink_count_threshold(dgx1):
    violations = policy.check(dgx1, {"all_pairs_link": "NV2", "nvlink_peers_min": 4})
    assert "GPU0<->GPU1: NV1, expected NV2" in violations
    assert not any("peers" in line for line in violations)
    assert policy.check(dgx1, {"nvlink_peers_min": 5})[0] == "GPU0: NVLink to 4 peers, expected at least 5"


def test_dgx1_profile_flags_old_driver(dgx1):
    assert policy.check(dgx1, policy.resolve_expectations("dgx1-v100")) == [
        "driver: 440.33.01 is branch 440, expected branch 535 or newer"]


def test_explicit_values_override_profile(dgx1):
    expectations = policy.resolve_expectations("dgx1-v100", min_driver_branch=418)
    assert expectations["min_driver_branch"] == 418
    assert policy.check(dgx1, expectations) == []


def test_gpu_count(h100):
    assert policy.check(h100, {"gpu_count": 4}) == ["gpu_count: found 8, expected 4"]


def test_nic_distance_and_numa():
    pairs = machine("topo-a100-4gpu-nvlink-bridge-pairs.txt", "NVIDIA A100-PCIE-40GB")
    violations = policy.check(pairs, {"nic_max_distance": "NODE", "gpu_nic_same_numa": True})
    assert violations == [
        "GPU2: nearest NIC mlx5_0 at SYS, expected NODE or closer",
        "GPU2: no NIC on its NUMA node (nearest mlx5_0 at SYS)",
        "GPU3: nearest NIC mlx5_0 at SYS, expected NODE or closer",
        "GPU3: no NIC on its NUMA node (nearest mlx5_0 at SYS)",
    ]
    assert pairs["summary"] == "4x NVIDIA A100-PCIE-40GB, pairs NV12 to SYS, 2 NICs at NODE to SYS"


def test_nic_legend_names_the_device():
    box = machine("topo-rtx4090-8gpu-2nic-sys.txt", "NVIDIA GeForce RTX 4090")
    assert policy.check(box, {"nic_max_distance": "PHB"})[0] == "GPU0: nearest NIC NIC0 at SYS, expected PHB or closer"
    h100 = machine("topo-hgx-h100-8gpu-8nic-r570.txt", "NVIDIA H100 80GB HBM3")
    assert policy.check(h100, {"nic_max_distance": "PIX"}) == []
    h100["links"]["GPU3"]["NIC3"] = "SYS"
    assert policy.check(h100, {"nic_max_distance": "PIX"}) == [
        "GPU3: nearest NIC mlx5_0 (NIC0) at NODE, expected PIX or closer"]


def test_pcie_profile_needs_a_nic():
    box = machine("topo-rtx5090-2gpu-phb.txt", "NVIDIA GeForce RTX 5090", driver="580.126.20")
    assert policy.check(box, policy.resolve_expectations("pcie")) == [
        "no NIC in the topology, expected one within NODE of every GPU"]
    assert box["summary"] == "2x NVIDIA GeForce RTX 5090, all pairs PHB, no NIC"


def test_single_gpu_summary():
    box = machine("topo-h100-pcie-1gpu-1nic-r575.txt", "NVIDIA H100 PCIe", driver="575.57.08")
    assert box["summary"] == "1x NVIDIA H100 PCIe, 1 NIC at PHB"
    assert box["gpus"][0]["nearest_nic"] == "mlx5_0"
    assert box["gpus"][0]["numa_node"] == 0


def test_no_gpu_passes_without_expectations_and_fails_with_them():
    empty = policy.assemble([], reason="nvidia-smi not found (nvidia-smi)")
    assert empty["gpu_count"] == 0
    assert empty["summary"] == "no GPU: nvidia-smi not found (nvidia-smi)"
    assert policy.check(empty, {}) == []
    assert policy.check(empty, {"gpu_count": 0}) == []
    assert policy.check(empty, {"gpu_count": 8}) == [
        "gpu_count: found 0, expected 8 (nvidia-smi not found (nvidia-smi))"]
    assert policy.check(empty, policy.resolve_expectations("pcie")) == [
        "no GPU found, but GPU expectations were given (nvidia-smi not found (nvidia-smi))"]


def test_missing_matrix_is_reported(h100):
    topology = policy.assemble(h100["gpus"], None, topology_error="nvidia-smi topo -m failed (rc=2): boom")
    assert policy.check(topology, {"all_pairs_link": "NV"}) == [
        "topology: no link matrix from 'nvidia-smi topo -m' (nvidia-smi topo -m failed (rc=2): boom)"]


@pytest.mark.parametrize("expectations, fragment", [
    ({"all_pairs_link": "NVLINK"}, "all_pairs_link"),
    ({"nic_max_distance": "X"}, "nic_max_distance"),
    ({"gpu_model": "H100("}, "gpu_model"),
    ({"gpu_count": -1}, "gpu_count"),
])
def test_invalid_expectations(expectations, fragment):
    problems = policy.validate_expectations(expectations)
    assert len(problems) == 1 and fragment in problems[0]


def test_unknown_profile():
    with pytest.raises(ValueError, match="unknown profile"):
        policy.resolve_expectations("dgx-b200")


def test_every_profile_has_busbw_floors():
    assert sorted(policy.BUSBW_FLOORS_GBPS) == sorted(policy.PROFILES)
    for profile, floors in policy.BUSBW_FLOORS_GBPS.items():
        assert sorted(floors) == sorted(policy.BUSBW_SCOPES), profile


@pytest.mark.parametrize("profile, scope, floor", [
    ("hgx-h100-8", "node", 250.0), ("hgx-h100-8", "fleet", 200.0),
    ("hgx-a100-8", "node", 150.0), ("hgx-a100-8", "fleet", 120.0),
    ("dgx1-v100", "node", 80.0), ("dgx1-v100", "fleet", 30.0),
    ("pcie", "node", 5.0), ("pcie", "fleet", 0.0),
    ("unknown-profile", "node", 0.0), (None, "node", 0.0), ("hgx-h100-8", "rack", 0.0),
])
def test_busbw_floor(profile, scope, floor):
    value = policy.busbw_floor(profile, scope)
    assert isinstance(value, float)
    assert value == floor


def test_busbw_floor_defaults_to_the_node_scope():
    assert policy.busbw_floor("hgx-a100-8") == policy.busbw_floor("hgx-a100-8", "node")


# (profile, scope, busbw of a healthy system from the sources cited next to BUSBW_FLOORS_GBPS,
#  busbw the same system gets on a fallback path)
@pytest.mark.parametrize("profile, scope, healthy, fallback", [
    ("hgx-h100-8", "node", 370.0, 50.0),    # ring over NVLink 4; PCIe 5.0 x16 at best
    ("hgx-h100-8", "fleet", 370.0, 48.0),   # 8 NDR rails; a single NDR NIC
    ("hgx-a100-8", "node", 200.0, 25.0),    # OEM HGX A100; PCIe 4.0 x16 at best
    ("hgx-a100-8", "fleet", 192.0, 24.0),   # 8 HDR rails; a single HDR NIC
    ("dgx1-v100", "fleet", 48.0, 12.2),     # 4 EDR adapters; a single EDR adapter
])
def test_busbw_floors_pass_healthy_systems_and_fail_fallbacks(profile, scope, healthy, fallback):
    floor = policy.busbw_floor(profile, scope)
    assert fallback < floor < healthy
    assert floor <= 0.8 * healthy


def test_fleet_floor_is_not_above_node_floor():
    for profile in policy.BUSBW_FLOORS_GBPS:
        assert policy.busbw_floor(profile, "fleet") <= policy.busbw_floor(profile, "node"), profile
