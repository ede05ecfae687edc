"""The NVSwitch fabric state of nvidia-smi -q (parse_fabric) and its verdict (fabric_verdict) on real outputs."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi

from test_nvidia_smi import FIXTURES, load

ZERO_UUID = "00000000-0000-0000-0000-000000000000"

# name: (GPUs, bus id of the first (None in a grep excerpt), name of the first, (state, status, clique, cluster)
#        of every GPU, health of the first, verdict status on an NVSwitch node, words of its reason)
FABRIC_CASES = {
    "q-h100-sxm-8gpu-fabric-completed-r565.txt": (
        8, "00000000:18:00.0", "NVIDIA H100 80GB HBM3", ("Completed", "Success", "0", ZERO_UUID),
        {"bandwidth": "N/A"},
        "passed", "8 GPU(s): fabric Completed/Success, clique 0, cluster " + ZERO_UUID),
    "q-a100-sxm4-4gpu-fabric-na-r555.txt": (
        4, "00000000:68:00.0", "NVIDIA A100-SXM4-80GB", ("N/A", "N/A", "N/A", "N/A"), {"bandwidth": "N/A"},
        "skipped", "every GPU reports fabric state N/A"),
    "q-h100-nvl-2gpu-fabric-na-r550.txt": (
        2, "00000000:AD:00.0", "NVIDIA H100 NVL", ("N/A", "N/A", "N/A", "N/A"), {"bandwidth": "N/A"},
        "skipped", "every GPU reports fabric state N/A"),
    "q-fabric-grep-completed-unhealthy-clique2.txt": (
        1, None, None, ("Completed", "Success", "2", "dc6e40c4-d722-4357-9ba6-5291dd461278"),
        {"summary": "Unhealthy", "bandwidth": "Full"},
        "failed", "GPU0: Completed/Success but fabric health Unhealthy (bandwidth Full)"),
    "q-fabric-grep-completed-insufficient-resources.txt": (
        1, None, None, ("Completed", "Insufficient Resources", "0", ZERO_UUID), {},
        "failed", "GPU0: Completed with status Insufficient Resources"),
}


def test_every_q_fixture_is_covered():
    assert sorted(name for name in os.listdir(FIXTURES) if name.startswith("q-")) == sorted(FABRIC_CASES)


@pytest.mark.parametrize("name", sorted(FABRIC_CASES))
def test_parse_fabric(name):
    count, bus_id, gpu_name, fields, health, _unused, _unused = FABRIC_CASES[name]
    gpus = nvidia_smi.parse_fabric(load(name))
    assert len(gpus) == count
    assert [gpu["index"] for gpu in gpus] == list(range(count))
    assert gpus[0]["bus_id"] == bus_id
    assert gpus[0]["name"] == gpu_name
    assert gpus[0]["health"] == health
    for gpu in gpus:
        assert gpu["fabric"] is True
        assert (gpu["state"], gpu["status"], gpu["clique_id"], gpu["cluster_uuid"]) == fields


@pytest.mark.parametrize("name", sorted(FABRIC_CASES))
def test_fabric_verdict_on_an_nvswitch_node(name):
    count, _unused, _unused, _unused, _unused, status, reason = FABRIC_CASES[name]
    verdict = nvidia_smi.fabric_verdict(nvidia_smi.parse_fabric(load(name)), True, gpu_count=count)
    assert verdict["status"] == status
    assert verdict["reason"].startswith(reason)
    assert len(verdict["detail"]["gpus"]) == count
    assert verdict["detail"]["nvswitch"] is True


@pytest.mark.parametrize("name", sorted(FABRIC_CASES))
@pytest.mark.parametrize("nvswitch,words", [(False, "no NVSwitch on the node"),
                                            (None, "gpufleet_node.nvswitch not set")])
def test_fabric_verdict_without_nvswitch_is_skipped(name, nvswitch, words):
    verdict = nvidia_smi.fabric_verdict(nvidia_smi.parse_fabric(load(name)), nvswitch)
    assert verdict["status"] == "skipped"
    assert words in verdict["reason"]


def test_h100_bus_ids_uuids_in_index_order():
    gpus = nvidia_smi.parse_fabric(load("q-h100-sxm-8gpu-fabric-completed-r565.txt"))
    assert [gpu["bus_id"][9:11] for gpu in gpus] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    assert gpus[0]["uuid"] == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert gpus[1]["uuid"] == "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd"


def test_fabric_section_ends_at_the_next_gpu_field():
    # In the full report "Processes" and "Capabilities" follow Fabric at the same depth: not fabric fields.
    gpu = nvidia_smi.parse_fabric(load("q-h100-sxm-8gpu-fabric-completed-r565.txt"))[0]
    assert set(gpu) == {"index", "bus_id", "name", "uuid", "fabric", "state", "status", "clique_id",
                        "cluster_uuid", "health"}


def test_no_gpu_is_skipped_with_the_reason():
    verdict = nvidia_smi.fabric_verdict([], True, gpu_count=0, reason="nvidia-smi not found (nvidia-smi)")
    assert verdict == {"status": "skipped", "reason": "no NVIDIA GPU: nvidia-smi not found (nvidia-smi)",
                       "detail": {"nvswitch": True, "gpus": []}}


def test_nvidia_smi_q_error_fails_on_an_nvswitch_node():
    verdict = nvidia_smi.fabric_verdict([], True, gpu_count=8, error="nvidia-smi -q failed (rc=15): Unknown Error")
    assert verdict["status"] == "failed"
    assert verdict["reason"] == "nvidia-smi -q failed (rc=15): Unknown Error"


def test_output_without_fabric_section_is_skipped():
    # The captured H200 VM's query-gpu CSV carries no -q report: nothing to judge, so skipped, never passed.
    gpus = nvidia_smi.parse_fabric(load("query-gpu-h200-1gpu-vm-r580.txt"))
    assert gpus == []
    verdict = nvidia_smi.fabric_verdict(gpus, True, gpu_count=1)
    assert verdict["status"] == "skipped"
    assert "no Fabric section" in verdict["reason"]


def _h100_with(index, state, status):
    """The real H100 report with one GPU's fabric state set to a state the fabric manager leaves behind."""
    gpus = nvidia_smi.parse_fabric(load("q-h100-sxm-8gpu-fabric-completed-r565.txt"))
    gpus[index].update(state=state, status=status)
    return gpus


@pytest.mark.parametrize("state", ["In Progress", "Not Started"])
def test_fabric_manager_pending_names_each_gpu_and_the_fabric_manager(state):
    gpus = _h100_with(3, state, "N/A")
    gpus[5].update(state=state, status="N/A")
    verdict = nvidia_smi.fabric_verdict(gpus, True, gpu_count=8)
    assert verdict["status"] == "failed"
    assert verdict["reason"].startswith("GPU3 (00000000:5D:00.0): %s; GPU5 (00000000:AB:00.0): %s - " % (state, state))
    assert "fabric manager has not finished" in verdict["reason"] and "not running" in verdict["reason"]
    assert "nvidia-fabricmanager" in verdict["reason"]


def test_one_gpu_without_fabric_state_among_reporting_ones_fails():
    gpus = _h100_with(6, "N/A", "N/A")
    verdict = nvidia_smi.fabric_verdict(gpus, True, gpu_count=8)
    assert verdict["status"] == "failed"
    assert verdict["reason"] == "GPU6 (00000000:BA:00.0): no fabric state (N/A)"
