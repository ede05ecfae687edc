"""The gpu_topology module with nvidia-smi's recorded output at the run_command boundary."""
import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.cluster.plugins.modules import gpu_topology

from module_harness import Exit, Fail, patch_module
from test_nvidia_smi import load

# What nvidia-smi prints on a host whose driver is missing or not loaded (rc 9).
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n\n")


def query_rows(count, name, driver):
    """--query-gpu rows for the recorded machines: name and driver as their sources report them, the
    identifiers (uuid, bus id) are placeholders since those sources do not print them."""
    return "".join("%d, %s, GPU-placeholder-%d, 00000000:%02X:00.0, 81559, %s\n" % (i, name, i, 0x18 + i, driver)
                   for i in range(count))


H100_TOPO = load("topo-hgx-h100-8gpu-8nic-r570.txt")
H100_QUERY = query_rows(8, "NVIDIA H100 80GB HBM3", "570.133.20")
A100_PAIRS_TOPO = load("topo-a100-4gpu-nvlink-bridge-pairs.txt")
A100_QUERY = query_rows(4, "NVIDIA A100-PCIE-40GB", "535.54.03")
# nvidia-smi -q of a real 8x H100 SXM node (driver 565.57.01): every GPU Fabric Completed / Success.
H100_Q = load("q-h100-sxm-8gpu-fabric-completed-r565.txt")


class Outcome(object):
    """How the module ended: failed (fail_json) or not, and the result it returned."""

    def __init__(self, failed, result):
        self.failed = failed
        self.result = result


def run(monkeypatch, args, outputs, binary="/usr/bin/nvidia-smi"):
    """Run the module; ``outputs`` maps the nvidia-smi subcommand to (rc, stdout, stderr)."""
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(argv)
        assert kwargs.get("environ_update", {}).get("LC_ALL") == "C"
        key = "query" if argv[1].startswith("--query-gpu") else argv[1]
        return outputs[key]

    patch_module(monkeypatch, run_command)
    # None: nvidia-smi is not on the host.
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: binary)
    with patch_module_args(args):
        with pytest.raises((Exit, Fail)) as info:
            gpu_topology.main()
    return Outcome(isinstance(info.value, Fail), info.value.args[0]), calls


HEALTHY_H100 = {"query": (0, H100_QUERY, ""), "topo": (0, H100_TOPO, ""), "nvlink": (0, "", ""),
                "-q": (0, H100_Q, "")}
A100_PAIRS = {"query": (0, A100_QUERY, ""), "topo": (0, A100_PAIRS_TOPO, ""), "nvlink": (0, "", ""),
              "-q": (0, load("q-a100-sxm4-4gpu-fabric-na-r555.txt"), "")}
NO_GPU = {"query": (9, NO_DRIVER, "")}

CASES = [
    # id, args, outputs, binary, failed, expected violations (substring of each line, in order)
    ("h100-no-expectations", {}, HEALTHY_H100, "/usr/bin/nvidia-smi", False, []),
    ("h100-profile", {"profile": "hgx-h100-8"}, HEALTHY_H100, "/usr/bin/nvidia-smi", False, []),
    ("h100-expects-12", {"gpu_count": 12}, HEALTHY_H100, "/usr/bin/nvidia-smi", True,
     ["gpu_count: found 8, expected 12"]),
    ("a100-pairs-nv", {"all_pairs_link": "NV"}, A100_PAIRS, "/usr/bin/nvidia-smi", True,
     ["GPU0<->GPU2: SYS, expected NV", "GPU0<->GPU3: SYS, expected NV", "GPU1<->GPU2: SYS, expected NV",
      "GPU1<->GPU3: SYS, expected NV", "GPU2<->GPU3: NODE, expected NV"]),
    ("a100-pairs-report-only", {"all_pairs_link": "NV", "fail_on_violation": False}, A100_PAIRS,
     "/usr/bin/nvidia-smi", False,
     ["GPU0<->GPU2", "GPU0<->GPU3", "GPU1<->GPU2", "GPU1<->GPU3", "GPU2<->GPU3"]),
    ("no-driver-no-expectations", {}, NO_GPU, "/usr/bin/nvidia-smi", False, []),
    ("no-driver-expects-8", {"gpu_count": 8}, NO_GPU, "/usr/bin/nvidia-smi", True,
     ["gpu_count: found 0, expected 8 (nvidia-smi failed (rc=9): NVIDIA-SMI has failed because it couldn't"]),
    ("no-binary-expects-8", {"gpu_count": 8}, {}, None, True,
     ["gpu_count: found 0, expected 8 (nvidia-smi not found (nvidia-smi))"]),
    ("no-binary-gpu-count-0", {"gpu_count": 0}, {}, None, False, []),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_module(monkeypatch, case):
    _unused, args, outputs, binary, failed, expected = case
    outcome, calls = run(monkeypatch, args, outputs, binary)
    assert outcome.failed is failed, outcome.result.get("msg")
    assert outcome.result["changed"] is False
    violations = outcome.result["violations"]
    assert len(violations) == len(expected)
    for line, fragment in zip(violations, expected):
        assert fragment in line
    if failed:
        assert outcome.result["msg"].startswith("GPU topology does not meet expectations")
        assert outcome.result["msg"].splitlines()[1:] == violations
    if binary is None:
        assert calls == []


def test_facts_from_recorded_h100(monkeypatch):
    outcome, calls = run(monkeypatch, {}, HEALTHY_H100)
    facts = outcome.result["ansible_facts"]["gpu_topology"]
    assert facts["gpu_count"] == 8
    assert facts["summary"] == "8x NVIDIA H100 80GB HBM3, all pairs NV18, 8 NICs at PIX"
    assert facts["gpus"][4]["cpu_affinity"] == "48-95,144-191"
    assert facts["gpus"][4]["numa_node"] == 1
    assert facts["gpus"][4]["nearest_nic"] == "mlx5_4"
    assert facts["gpus"][0]["nvlink_peers"] == 7
    assert facts["nic_devices"][7] == {"name": "NIC7", "device": "mlx5_7"}
    assert [argv[1:] for argv in calls] == [
        ["--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version", "--format=csv,noheader,nounits"],
        ["topo", "-m"], ["nvlink", "-s"], ["-q"]]


def test_no_driver_reason(monkeypatch):
    outcome, _unused = run(monkeypatch, {}, NO_GPU)
    facts = outcome.result["ansible_facts"]["gpu_topology"]
    assert facts["gpu_count"] == 0
    assert facts["reason"].startswith("nvidia-smi failed (rc=9): NVIDIA-SMI has failed")
    assert facts["gpus"] == []


def test_nvlink_counts_from_recorded_status(monkeypatch):
    outputs = dict(HEALTHY_H100)
    outputs["nvlink"] = (0, load("nvlink-s-v100-inactive-links.txt"), "")
    outcome, _unused = run(monkeypatch, {}, outputs)
    gpu3 = outcome.result["ansible_facts"]["gpu_topology"]["gpus"][3]
    assert (gpu3["nvlinks_active"], gpu3["nvlinks_inactive"]) == (4, 2)


def test_topo_failure_is_reported_not_fatal(monkeypatch):
    outputs = dict(HEALTHY_H100)
    outputs["topo"] = (2, "", "Failed to run topo\n")
    outcome, _unused = run(monkeypatch, {}, outputs)
    assert outcome.failed is False
    facts = outcome.result["ansible_facts"]["gpu_topology"]
    assert facts["topology_error"] == "nvidia-smi topo -m failed (rc=2): Failed to run topo"
    assert facts["summary"] == "8x NVIDIA H100 80GB HBM3"


def test_bad_expectation_fails_before_running_nvidia_smi(monkeypatch):
    outcome, calls = run(monkeypatch, {"all_pairs_link": "NVLINK"}, HEALTHY_H100)
    assert outcome.failed is True
    assert "invalid GPU topology expectations" in outcome.result["msg"]
    assert calls == []


def test_captured_h200_gives_the_fact_the_module_gave_on_that_machine(monkeypatch):
    """The three outputs captured on an H200 node, fed back: the fact is the one the module returned there."""
    import json
    outputs = {"query": (0, load("query-gpu-h200-1gpu-vm-r580.txt"), ""),
               "topo": (0, load("topo-h200-1gpu-vm-r580.txt"), ""),
               "nvlink": (0, load("nvlink-s-h200-1gpu-vm-r580.txt"), "")}
    on_device = json.loads(load("gpu-topology-fact-h200-1gpu-vm-r580.txt"))
    outcome, calls = run(monkeypatch, {"min_driver_branch": 535, "fail_on_violation": False, "nvswitch": False},
                         dict(outputs, **{"-q": (0, "", "")}))
    assert outcome.failed is False
    facts = dict(outcome.result["ansible_facts"]["gpu_topology"])
    # The capture predates the fabric entry; the rest of the fact is what the module returned on that machine.
    fabric = facts.pop("fabric")
    assert {"gpu_topology": facts} == on_device["ansible_facts"]
    assert fabric["verdict"]["status"] == "skipped"
    assert fabric["verdict"]["reason"] == "no NVSwitch on the node: no NVLink fabric to register"
    assert outcome.result["violations"] == on_device["violations"] == []
    facts = outcome.result["ansible_facts"]["gpu_topology"]
    assert facts["summary"] == "1x NVIDIA H200, no NIC"
    assert facts["gpus"][0]["memory_total_mib"] == 143771


def test_captured_h200_against_an_8_gpu_profile(monkeypatch):
    outputs = {"query": (0, load("query-gpu-h200-1gpu-vm-r580.txt"), ""),
               "topo": (0, load("topo-h200-1gpu-vm-r580.txt"), ""),
               "nvlink": (0, load("nvlink-s-h200-1gpu-vm-r580.txt"), ""), "-q": (0, "", "")}
    outcome, _unused = run(monkeypatch, {"gpu_count": 8, "min_driver_branch": 590}, outputs)
    assert outcome.failed is True
    assert any("gpu_count: found 1, expected 8" in line for line in outcome.result["violations"])
    assert any("590" in line for line in outcome.result["violations"])


def test_fabric_of_recorded_h100_on_an_nvswitch_node(monkeypatch):
    outcome, _unused = run(monkeypatch, {"nvswitch": True}, HEALTHY_H100)
    assert outcome.failed is False
    fabric = outcome.result["ansible_facts"]["gpu_topology"]["fabric"]
    assert fabric["error"] is None
    assert [gpu["state"] for gpu in fabric["gpus"]] == ["Completed"] * 8
    assert fabric["gpus"][7]["bus_id"] == "00000000:DB:00.0"
    assert fabric["verdict"]["status"] == "passed"
    assert fabric["verdict"]["reason"] == ("8 GPU(s): fabric Completed/Success, clique 0, "
                                           "cluster 00000000-0000-0000-0000-000000000000")
    assert outcome.result["violations"] == []


def test_fabric_unknown_nvswitch_is_skipped(monkeypatch):
    outcome, _unused = run(monkeypatch, {}, HEALTHY_H100)
    verdict = outcome.result["ansible_facts"]["gpu_topology"]["fabric"]["verdict"]
    assert verdict["status"] == "skipped"
    assert "gpufleet_node.nvswitch not set" in verdict["reason"]


def test_fabric_na_on_a100_is_skipped_not_passed(monkeypatch):
    outcome, _unused = run(monkeypatch, {"nvswitch": True}, A100_PAIRS)
    verdict = outcome.result["ansible_facts"]["gpu_topology"]["fabric"]["verdict"]
    assert verdict["status"] == "skipped"
    assert "N/A" in verdict["reason"]


def test_fabric_query_failure_fails_the_fabric_verdict_only(monkeypatch):
    outputs = dict(HEALTHY_H100)
    outputs["-q"] = (15, "", "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n")
    outcome, _unused = run(monkeypatch, {"nvswitch": True}, outputs)
    assert outcome.failed is False
    fabric = outcome.result["ansible_facts"]["gpu_topology"]["fabric"]
    assert fabric["error"] == ("nvidia-smi -q failed (rc=15): Unable to determine the device handle for "
                               "GPU0000:18:00.0: Unknown Error")
    assert fabric["verdict"] == {"status": "failed", "reason": fabric["error"],
                                 "detail": {"nvswitch": True, "gpus": []}}


@pytest.mark.parametrize("outputs,binary", [(NO_GPU, "/usr/bin/nvidia-smi"), ({}, None)], ids=["no-driver", "no-binary"])
def test_fabric_without_gpu_is_skipped_with_the_reason(monkeypatch, outputs, binary):
    outcome, calls = run(monkeypatch, {"nvswitch": True}, outputs, binary)
    fabric = outcome.result["ansible_facts"]["gpu_topology"]["fabric"]
    assert fabric["verdict"]["status"] == "skipped"
    assert fabric["verdict"]["reason"].startswith("no NVIDIA GPU: nvidia-smi ")
    assert ["-q"] not in [argv[1:] for argv in calls]
