"""Step verdicts of the validate role (plugin_utils/verdicts.py, filter plugin filter/verdicts.py).

Every input is shaped like the result the role's task registers: a command's rc/stdout/stderr/stdout_lines
(with ``msg: non-zero return code`` and ``failed_when_result`` when it exits non-zero under
``failed_when: false``), a skipped task's ``skipped``/``skip_reason``/``false_condition``, uri's
status/content/msg, systemd_service's ``status`` dict, and the gpufleet modules' own returns, built from the
recorded fixtures where the repository has them (tests/fixtures/nvidia-smi, tests/fixtures/sysfs,
tests/fixtures/cosign, tests/fixtures/lspci).

dcgmi diag tables follow the layout dcgmi prints (dcgmi/Diag.cpp in NVIDIA/DCGM): a 25-character name
column and a 46-character result column; DCGM 3 prints per-GPU results as ``Fail - GPU: 0`` rows with an
empty name and messages as ``Warning`` rows, DCGM 4 prints ``GPU0: Fail`` rows and ``Warning: GPU0`` rows.
"""
import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.filter import verdicts as filters
from ansible_collections.gpufleet.cluster.plugins.module_utils import cosign as cs
from ansible_collections.gpufleet.cluster.plugins.module_utils import pcie_health
from ansible_collections.gpufleet.cluster.plugins.module_utils import topology_policy
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import verdicts as vd
from ansible_collections.gpufleet.cluster.plugins.modules import node_facts, rdma_facts

from conftest import FIXTURES, ROOT, fixture_parts
from test_node_facts import NOKYAN_512_SLOT, e12_with_links
from test_nvidia_smi import load

TASKS = os.path.join(ROOT, "roles", "validate", "tasks")


# ---------------------------------------------------------------------------------------------------------
# Registered-result builders


def skipped(condition):
    """What a task skipped by its ``when`` registers."""
    return {"changed": False, "false_condition": condition, "skip_reason": "Conditional result was False",
            "skipped": True}


def command(rc, stdout="", stderr="", cmd=None):
    """What ``ansible.builtin.command`` with ``failed_when: false`` registers."""
    result = {"changed": False, "cmd": cmd or [], "delta": "0:00:01.012345", "end": "2026-11-29 21:58:01.000000",
              "failed": False, "msg": "", "rc": rc, "start": "2026-11-29 21:58:00.000000",
              "stderr": stderr, "stderr_lines": stderr.splitlines(), "stdout": stdout,
              "stdout_lines": stdout.splitlines()}
    if rc != 0:
        result.update(msg="non-zero return code", failed_when_result=False)
    return result


def command_not_executable(cmd, errno_text):
    """What the command module registers when the binary cannot be started at all."""
    return {"changed": False, "cmd": cmd, "failed": False, "failed_when_result": False, "msg": errno_text,
            "rc": 2, "stderr": "", "stderr_lines": [], "stdout": "", "stdout_lines": []}


def module_failed(**result):
    """A module's fail_json under ``failed_when: false``."""
    result.setdefault("changed", False)
    result.update(failed=False, failed_when_result=False)
    return result


def module_crashed(stderr):
    return module_failed(msg="MODULE FAILURE: No start of json char found\nSee stdout/stderr for the exact error",
                         module_stderr=stderr, module_stdout="", rc=1)


# ---------------------------------------------------------------------------------------------------------
# topology


def gpu_topology_result(topology, expectations):
    """What gpufleet.cluster.gpu_topology registers with fail_on_violation=false (as its main() builds it)."""
    violations = topology_policy.check(topology, expectations)
    topology["violations"] = violations
    return {"changed": False, "failed": False, "violations": violations, "expectations": expectations,
            "ansible_facts": {"gpu_topology": topology}}


H200 = json.loads(load("gpu-topology-fact-h200-1gpu-vm-r580.txt"))
H200_VIOLATED = gpu_topology_result(copy.deepcopy(H200["ansible_facts"]["gpu_topology"]),
                                    topology_policy.resolve_expectations(None, gpu_count=8, min_driver_branch=535))
NO_SMI = gpu_topology_result(topology_policy.assemble([], reason="nvidia-smi not found (nvidia-smi)"), {})
NO_GPU_ASKED = gpu_topology_result(topology_policy.assemble([], reason="nvidia-smi not found (nvidia-smi)"),
                                   topology_policy.resolve_expectations("hgx-h100-8"))
NO_REASON = {"changed": False, "failed": False, "violations": [], "expectations": {},
             "ansible_facts": {"gpu_topology": {"gpu_count": 0, "reason": None, "driver_version": None,
                                                "summary": "no GPU", "violations": []}}}

TOPOLOGY_CASES = [
    ("recorded H200 passes with its summary", H200, "passed", "1x NVIDIA H200, no NIC"),
    ("expectations missed fail with each violation", H200_VIOLATED, "failed",
     "; ".join(H200_VIOLATED["violations"])),
    ("no nvidia-smi is skipped with its reason", NO_SMI, "skipped", "no NVIDIA GPU: nvidia-smi not found (nvidia-smi)"),
    ("no GPU without a reason says only that", NO_REASON, "skipped", "no NVIDIA GPU"),
    ("no GPU where the profile asks for 8 fails", NO_GPU_ASKED, "failed", "; ".join(NO_GPU_ASKED["violations"])),
    ("invalid expectations fail with the module's message",
     module_failed(msg="invalid GPU topology expectations: gpu_count must be positive"), "failed",
     "invalid GPU topology expectations: gpu_count must be positive"),
]


@pytest.mark.parametrize("name, result, status, reason", TOPOLOGY_CASES, ids=[c[0] for c in TOPOLOGY_CASES])
def test_topology_verdict(name, result, status, reason):
    got = vd.topology_verdict(result)
    assert (got["status"], got["reason"]) == (status, reason)


def test_topology_detail_keeps_the_facts_the_report_shows():
    assert vd.topology_verdict(H200)["detail"] == {
        "gpu_count": 1, "driver_version": "580.159.04", "summary": "1x NVIDIA H200, no NIC",
        "expectations": {"min_driver_branch": 535}}


def test_topology_violations_are_real():
    assert H200_VIOLATED["violations"] and NO_GPU_ASKED["violations"]


# ---------------------------------------------------------------------------------------------------------
# pcie: the gpufleet_node fact's pcie entry, as node_facts reads it from sysfs


SYSFS = os.path.join(FIXTURES, "sysfs")
PCIE_KINDS = dict(((vendor_id, class_id), kind) for vendor_id, class_id, kind in pcie_health.DEFAULT_CLASSES)


def node_fact(tree):
    """The gpufleet_node fact node_facts returns on a recorded tree (no os-release there)."""
    return node_facts.gather(tree, os.path.join(tree, "etc", "os-release"))


def lspci_node(name):
    """A gpufleet_node whose pcie entry holds the GPUs and NICs of a recorded lspci -vvv (tests/fixtures/lspci):
    the shape sysfs_link() gives, with the values lspci printed."""
    devices = pcie_health.parse_lspci_vvv(fixture_parts("lspci", name)[1])
    return {"container": False, "virtualization": "metal",
            "pcie": [dict(device, kind=PCIE_KINDS[(device["vendor_id"], device["class_id"])]) for device in devices
                     if (device["vendor_id"], device["class_id"]) in PCIE_KINDS]}


def gpu_speed_note(address, name, current, capable):
    return ("GPU %s (%s): link speed %sGT/s, capable of %sGT/s - may be power saving while idle, check again under "
            "load" % (address, name, current, capable))


RTX6000ADA = "NVIDIA Corporation AD102GL [RTX 6000 Ada Generation] (rev a1)"
E12_NODE = lspci_node("asus-esc8000a-e12-rtx6000ada-cx7-idle.txt")
E13P_NODE = lspci_node("asus-esc8000a-e13p-pex890xx-rtx-pro-6000-idle.txt")
H200_VM_NODE = node_fact(os.path.join(SYSFS, "h200_vm"))
E12_SYSFS_NODE = node_fact(os.path.join(SYSFS, "asus_esc8000a_e12"))
NO_PCIE_NODE = dict((key, value) for key, value in H200_VM_NODE.items() if key != "pcie")
# The recorded H200 VM's GPU (its capability not read) beside the E12's two ConnectX-7 read by lspci.
MIXED_NODE = dict(H200_VM_NODE, pcie=H200_VM_NODE["pcie"] + [d for d in E12_NODE["pcie"] if d["kind"] == "NIC"])
H200_NOT_CHECKED = "GPU 0000:00:06.0 (3D controller): link capability not known, not checked"

PCIE_CASES = [
    ("idle GPUs at a lower speed pass with the power-saving notes", E12_NODE, {}, "passed",
     "PCIe links of 4 GPUs and 2 NICs at their capable width; " + "; ".join(
         gpu_speed_note(address, RTX6000ADA, "2.5", "16")
         for address in ("0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0"))),
    ("GPUs behind a PCIe switch, idle", E13P_NODE, {}, "passed",
     "PCIe links of 2 GPUs at their capable width; " + "; ".join(
         gpu_speed_note(address, "NVIDIA Corporation Device 2bb5 (rev a1)", "2.5", "32")
         for address in ("0000:06:00.0", "0000:07:00.0"))),
    ("a link not read is a note when others were checked", MIXED_NODE, {}, "passed",
     "PCIe links of 2 NICs at their capable width and speed; " + H200_NOT_CHECKED),
    ("check off", E12_NODE, {"enabled": False}, "skipped", "check off"),
    ("no link capability in the captured H200 VM", H200_VM_NODE, {}, "skipped",
     "PCIe links could not be read: " + H200_NOT_CHECKED),
    ("no link files in a tree recorded without them", E12_SYSFS_NODE, {}, "skipped",
     "PCIe links could not be read: " + "; ".join(
         "%s %s (%s): link capability not known, not checked" % (d["kind"], d["address"], d["class"])
         for d in E12_SYSFS_NODE["pcie"])),
    ("no GPU, no Mellanox NIC", node_fact(os.path.join(SYSFS, "ib_ndr_active")), {}, "skipped",
     "no NVIDIA GPU or Mellanox NIC under /sys/bus/pci/devices"),
    ("a container that sees no PCI device", dict(H200_VM_NODE, pcie=[], container=True, virtualization="docker"), {},
     "skipped", "no NVIDIA GPU or Mellanox NIC under /sys/bus/pci/devices in this docker container"),
    ("facts read by an older node_facts", NO_PCIE_NODE, {}, "skipped",
     "gpufleet_node has no PCIe links (read by an older node_facts): run preflight again"),
]


@pytest.mark.parametrize("name, node, kwargs, status, reason", PCIE_CASES, ids=[c[0] for c in PCIE_CASES])
def test_pcie_verdict(name, node, kwargs, status, reason):
    got = vd.pcie_verdict(node, **kwargs)
    assert (got["status"], got["reason"]) == (status, reason)


def test_pcie_verdict_of_the_e12_read_from_sysfs(tmp_path):
    """The E12's links written as sysfs files into its recorded tree and read by node_facts: the same verdict as
    lspci's, with both functions of each ConnectX-7; the detail lists every device's link."""
    got = vd.pcie_verdict(node_fact(e12_with_links(tmp_path)))
    assert got["status"] == "passed"
    assert got["reason"] == "PCIe links of 4 GPUs and 4 NICs at their capable width; " + "; ".join(
        gpu_speed_note(address, "VGA compatible controller", "2.5", "16")
        for address in ("0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0"))
    assert got["detail"]["problems"] == []
    assert [note["address"] for note in got["detail"]["notes"]] == [
        "0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0"]
    assert got["detail"]["devices"][:2] == [
        {"address": "0000:01:00.0", "kind": "GPU", "driver": None, "current": "2.5GT/s x16", "capable": "16GT/s x16"},
        {"address": "0000:21:00.0", "kind": "NIC", "driver": None, "current": "32GT/s x16", "capable": "32GT/s x16"}]


@pytest.mark.parametrize("address, kind, name, problems", [
    # A ConnectX-7 (a PCIe Gen5 x16 device: 32GT/s x16, as the E12's are) on nokyan/resources#512's slot link:
    # narrower and slower, both a problem for a NIC.
    ("0000:21:00.0", "NIC", "Ethernet controller", ["link width x8, capable of x16",
                                                    "link speed 16GT/s, capable of 32GT/s"]),
    # The same slot link on a GPU: narrower is a problem, the lower speed only a note (power saving).
    ("0000:01:00.0", "GPU", "VGA compatible controller", ["link width x8, capable of x16"]),
])
def test_pcie_verdict_fails_a_narrow_link(tmp_path, address, kind, name, problems):
    got = vd.pcie_verdict(node_fact(e12_with_links(tmp_path, {address: NOKYAN_512_SLOT})))
    messages = ["%s %s (%s): %s" % (kind, address, name, problem) for problem in problems]
    assert (got["status"], got["reason"]) == ("failed", "; ".join(messages))
    assert [(p["address"], p["current"], p["capable"]) for p in got["detail"]["problems"]] == [
        (address, current, capable) for current, capable in ((8, 16), (16.0, 32.0))[:len(problems)]]
    assert sorted(got) == ["detail", "reason", "status"]


# ---------------------------------------------------------------------------------------------------------
# fabric


def rdma_result(tree, **expect):
    """What gpufleet.cluster.rdma_facts registers (failed_when: false) on a recorded sysfs tree."""
    params = dict(sysfs_root=tree, exclude_hcas=[], expect_hcas=None, expect_state=None, min_rate_gbps=None,
                  link_layer=None, default_gid_index=3)
    params.update(expect)
    facts, problems = rdma_facts.run(params)
    if problems:
        return module_failed(msg="RDMA expectations not met:\n" + "\n".join(problems), problems=problems,
                             ansible_facts={"gpufleet_rdma": facts})
    return {"changed": False, "failed": False, "problems": [], "ansible_facts": {"gpufleet_rdma": facts}}


SYSFS = os.path.join(FIXTURES, "sysfs")
IB = rdma_result(os.path.join(SYSFS, "ib_ndr_active"))
ROCE = rdma_result(os.path.join(SYSFS, "roce_active"))
DOWN = rdma_result(os.path.join(SYSFS, "ib_port_down"))
DOWN_EXPECTED_ACTIVE = rdma_result(os.path.join(SYSFS, "ib_port_down"), expect_state="ACTIVE")
NO_HCA = rdma_result(os.path.join(SYSFS, "h200_vm"))
PORTLESS = {"changed": False, "failed": False, "problems": [],
            "ansible_facts": {"gpufleet_rdma": {"hcas": [{"name": "mlx5_0", "ports": []}]}}}

NOT_READ = "GPUDirect RDMA not read (gpudirect_facts did not run)"
UNCHECKED = "no fabric profile (gpufleet_fabric_expect), nothing checked; found "
# More fabric cases, with profiles and gpudirect_facts results: test_fabric_verdict.py.
FABRIC_CASES = [
    ("one active NDR port without a profile is skipped, found listed", IB, "skipped",
     UNCHECKED + "1 port(s) on 1 HCA(s): ACTIVE; 400 Gb/s; InfiniBand; " + NOT_READ),
    ("one active RoCE port without a profile is skipped, found listed", ROCE, "skipped",
     UNCHECKED + "1 port(s) on 1 HCA(s): ACTIVE; 100 Gb/s; Ethernet; " + NOT_READ),
    ("a down port without a profile is skipped, states counted", DOWN, "skipped",
     UNCHECKED + "2 port(s) on 2 HCA(s): ACTIVE 1, DOWN 1; 400 Gb/s; InfiniBand; " + NOT_READ),
    ("expectations rdma_facts itself missed fail on one line", DOWN_EXPECTED_ACTIVE, "failed",
     "RDMA expectations not met: " + "; ".join(DOWN_EXPECTED_ACTIVE["problems"])),
    ("no HCA is skipped", NO_HCA, "skipped", UNCHECKED + "no InfiniBand/RoCE HCA; " + NOT_READ),
    ("an HCA without ports is skipped, named", PORTLESS, "skipped",
     UNCHECKED + "no InfiniBand/RoCE port on mlx5_0; " + NOT_READ),
    ("a crashed module fails with its last line",
     module_crashed("Traceback (most recent call last):\n  ...\n"
                    "PermissionError: [Errno 13] Permission denied: '/sys'\n"),
     "failed", "PermissionError: [Errno 13] Permission denied: '/sys'"),
]


@pytest.mark.parametrize("name, result, status, reason", FABRIC_CASES, ids=[c[0] for c in FABRIC_CASES])
def test_fabric_verdict(name, result, status, reason):
    got = vd.fabric_verdict(result)
    assert (got["status"], got["reason"]) == (status, reason)


def test_fabric_detail_names_hcas_and_keeps_ports():
    detail = vd.fabric_verdict(DOWN)["detail"]
    assert detail["ib_ports"] == ["mlx5_0", "mlx5_1"]
    assert [p["name"] for p in detail["ports"]] == ["mlx5_0:1", "mlx5_1:1"]
    assert [p["pci_address"] for p in detail["ports"]] == ["0000:1a:00.0", "0000:3c:00.0"]
    assert vd.fabric_verdict(DOWN_EXPECTED_ACTIVE)["detail"]["ib_ports"] == ["mlx5_0", "mlx5_1"]
    empty = vd.fabric_verdict(NO_HCA)["detail"]
    assert (empty["ib_ports"], empty["ports"], empty["profile"], empty["problems"]) == ([], [], {}, [])
    assert empty["gpudirect"]["method"] is None and empty["gpudirect"]["usable"] is False


def test_fabric_problem_is_real():
    assert any("DOWN" in p for p in DOWN_EXPECTED_ACTIVE["problems"])


# ---------------------------------------------------------------------------------------------------------
# image

IMAGE = "registry.example.com/ml/pytorch-cuda:v2.7"
DIGEST = "sha256:5c99d8ed73711e9c33aeb592029fcb427c0595c0aa07edfd8165dbfb9a3b1206"
PINNED = "registry.example.com/ml/pytorch-cuda@" + DIGEST
with open(os.path.join(FIXTURES, "cosign", "fleet.pub")) as _handle:
    FINGERPRINT = cs.key_fingerprint(_handle.read())


def signed(pulled, by="key"):
    """What gpufleet.cluster.signed_image registers in check mode after cosign verified the image."""
    verified = {"by": by}
    if by == "key":
        verified.update(key_fingerprint=FINGERPRINT, identities=[], signatures=1,
                        docker_references=["registry.example.com/ml/pytorch-cuda"])
    return {"changed": pulled, "failed": False, "pulled": pulled, "tagged": False, "verified": verified,
            "digest": DIGEST, "image_pinned": PINNED}


WRONG_KEY_MSG = cs.failure_message(IMAGE, "no_matching_signature",
                                   "Error: no matching signatures: invalid signature when validating ASN.1 "
                                   "encoded signature")
WRONG_KEY = module_failed(msg=WRONG_KEY_MSG, reason="no_matching_signature", rc=1,
                          stderr="Error: no matching signatures\nmain.go:69: error during command execution",
                          pulled=False, tagged=False)
NO_RECORD = "no image record on the node (image_security has not run here since it records the scan gate)"
NO_COSIGN = module_failed(msg="cosign is not installed on %s (install it, or set cosign_path); nothing was pulled"
                          % IMAGE)

IMAGE_CASES = [
    ("no image configured is skipped", skipped("validate_image | length > 0"), "", False, "skipped",
     "no training image configured (gpufleet_image)"),
    ("no key is skipped", skipped("validate_image_key | length > 0"), IMAGE, False, "skipped",
     "no cosign key configured"),
    ("verified and present passes", signed(False), IMAGE, True, "passed",
     "signature verified with key %s, %s present; scan gate skipped: %s" % (FINGERPRINT, DIGEST, NO_RECORD)),
    ("verified but missing on the node fails", signed(True), IMAGE, True, "failed",
     "signature verified but %s is not on the node" % DIGEST),
    ("a refused signature fails with the module's sentence", WRONG_KEY, IMAGE, True, "failed", WRONG_KEY_MSG),
    ("cosign missing fails with the module's sentence", NO_COSIGN, IMAGE, True, "failed", NO_COSIGN["msg"]),
    ("a digest trusted as local without a verification this run fails", signed(False, by="local-digest"),
     PINNED, True, "failed",
     "%s: the signature was not verified against the registry in this run (verified by local-digest)" % DIGEST),
    ("a crashed module fails with its last line",
     module_crashed("Traceback (most recent call last):\nOSError: [Errno 28] No space left on device\n"),
     IMAGE, True, "failed", "OSError: [Errno 28] No space left on device"),
]


@pytest.mark.parametrize("name, result, image, key, status, reason", IMAGE_CASES, ids=[c[0] for c in IMAGE_CASES])
def test_image_verdict(name, result, image, key, status, reason):
    got = vd.image_verdict(result, image, key)
    assert (got["status"], got["reason"]) == (status, reason)


def test_image_detail_carries_digest_key_and_pinned_reference():
    assert vd.image_verdict(signed(False), IMAGE, True)["detail"] == {
        "digest": DIGEST, "key_fingerprint": FINGERPRINT, "verified_by": "key", "pinned": PINNED,
        "scan": {"status": "skipped", "reason": NO_RECORD}}
    assert FINGERPRINT.startswith("SHA256:")
    assert vd.image_verdict(WRONG_KEY, IMAGE, True)["detail"] == {
        "digest": None, "key_fingerprint": None, "verified_by": None, "pinned": None, "scan": None}
    assert vd.image_verdict(signed(False, by="local-digest"), PINNED, True)["detail"]["verified_by"] == "local-digest"


# ---------------------------------------------------------------------------------------------------------
# dcgm_diag

BORDER = "+---------------------------+------------------------------------------------+"
HEAD = (BORDER + "\n| Diagnostic                | Result                                         |\n"
        "+===========================+================================================+\n")


def row(name, cell):
    return "| %-25s | %-46s |\n" % (name, cell)


def diag_table(*sections):
    """dcgmi diag's table: sections of (rule line, [(name, cell), ...])."""
    text = "Successfully ran diagnostic for group.\n" + HEAD
    text += "|-----  Metadata  ----------+------------------------------------------------|\n"
    text += row("DCGM Version", "3.3.9") + row("Driver Version Detected", "580.159.04")
    text += row("GPU Device IDs Detected", "2335,2335")
    for rule, rows in sections:
        text += rule + "\n" + "".join(row(n, c) for n, c in rows)
    return text + BORDER + "\n"


DEPLOYMENT = "|-----  Deployment  --------+------------------------------------------------|"
HARDWARE = "+-----  Hardware  ----------+------------------------------------------------+"
INTEGRATION = "+-----  Integration  -------+------------------------------------------------+"

DCGM3_PASS = diag_table(
    (DEPLOYMENT, [("Denylist", "Pass"), ("NVML Library", "Pass"), ("CUDA Main Library", "Pass"),
                  ("Persistence Mode", "Pass"), ("Environment Variables", "Pass")]),
    (INTEGRATION, [("PCIe", "Pass - All")]),
    (HARDWARE, [("GPU Memory", "Pass - All")]))
DCGM3_FAIL = diag_table(
    (DEPLOYMENT, [("Denylist", "Pass"), ("Persistence Mode", "Fail"),
                  ("Warning", "Persistence mode for GPU 0 is disabled. Enable"),
                  ("", " persistence mode by running \"nvidia-smi -i <g"), ("", "puId> -pm 1 \" as root.")]),
    (INTEGRATION, [("PCIe", "Pass - All")]),
    (HARDWARE, [("GPU Memory", "Pass - GPU: 1"), ("", "Fail - GPU: 0"),
                ("Warning", "GPU 0 Error using CUDA API cuCtxCreate Check"), ("", "DCGM and system logs for errors.")]))
DCGM4_FAIL = diag_table(
    (DEPLOYMENT, [("software", "Pass"), ("", "GPU0: Pass"), ("", "GPU1: Pass")]),
    (HARDWARE, [("memory", "Fail"), ("", "GPU0: Pass"), ("", "GPU1: Fail"),
                ("Warning: GPU1", "GPU 1 Error using CUDA API cuCtxCreate Check D"), ("", "CGM and system logs.")]))
DCGM4_ERROR = diag_table(
    (HARDWARE, [("memory", "Error"), ("", "GPU0: Error")]),
    (INTEGRATION, [("pcie", "Pass"), ("", "GPU0: Pass")]))
# A warning whose text says "Error" and "Fail", on tests that passed or warned: not a failed test.
DCGM4_WARN = diag_table(
    (DEPLOYMENT, [("software", "Warn"), ("", "GPU0: Pass"),
                  ("Warning", "Error getting the graphics pids for GPU 0. Fa"), ("", "iled checks are skipped.")]),
    (HARDWARE, [("memory", "Pass"), ("", "GPU0: Pass")]))
HOSTENGINE_DOWN = ("Error: unable to establish a connection to the specified host: localhost\n"
                   "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")

DCGM_CMD = ["dcgmi", "diag", "-r", "1"]
DCGM_SKIPPED = skipped("validate_dcgm")
DCGM_CASES = [
    ("check off is skipped", DCGM_SKIPPED, dict(enabled=False, gpu_count=8, dcgmi_installed=True), "skipped",
     "check off"),
    ("no GPU is skipped", skipped("validate_gpu_count | int > 0"), dict(enabled=True, gpu_count=0,
                                                                        dcgmi_installed=True),
     "skipped", "no NVIDIA GPU"),
    ("no GPU wins over no dcgmi, as before", skipped("validate_dcgmi.stat.exists"),
     dict(enabled=True, gpu_count="0", dcgmi_installed=False), "skipped", "no NVIDIA GPU"),
    ("no dcgmi is skipped", skipped("validate_dcgmi.stat.exists"), dict(enabled=True, gpu_count=8,
                                                                        dcgmi_installed=False),
     "skipped", "DCGM not installed"),
    ("every test passing passes", command(0, DCGM3_PASS, cmd=DCGM_CMD), dict(gpu_count=2, dcgmi_installed=True),
     "passed", "dcgmi diag -r 1 passed"),
    ("warnings alone pass", command(0, DCGM4_WARN, cmd=DCGM_CMD), dict(gpu_count=1, dcgmi_installed=True),
     "passed", "dcgmi diag -r 1 passed"),
    ("DCGM 3 failures name their tests", command(226, DCGM3_FAIL, cmd=DCGM_CMD),
     dict(gpu_count=2, dcgmi_installed=True), "failed", "dcgmi diag -r 1 failed: Persistence Mode, GPU Memory"),
    ("DCGM 4 failures name their tests once", command(226, DCGM4_FAIL, cmd=DCGM_CMD),
     dict(gpu_count=2, dcgmi_installed=True), "failed", "dcgmi diag -r 1 failed: memory"),
    ("a Fail result fails even with rc 0", command(0, DCGM4_FAIL, cmd=DCGM_CMD),
     dict(gpu_count=2, dcgmi_installed=True), "failed", "dcgmi diag -r 1 failed: memory"),
    ("an Error result fails", command(0, DCGM4_ERROR, cmd=DCGM_CMD), dict(gpu_count=1, dcgmi_installed=True),
     "failed", "dcgmi diag -r 1 failed: memory"),
    ("no host engine fails with dcgmi's last line", command(255, HOSTENGINE_DOWN, cmd=DCGM_CMD),
     dict(gpu_count=8, dcgmi_installed=True), "failed",
     "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."),
    ("stderr comes before stdout", command(1, "Successfully ran diagnostic for group.\n",
                                           "terminate called after throwing an instance of 'std::bad_alloc'\n",
                                           cmd=DCGM_CMD),
     dict(gpu_count=8, dcgmi_installed=True), "failed",
     "terminate called after throwing an instance of 'std::bad_alloc'"),
    ("a silent non-zero exit says so", command(137, cmd=DCGM_CMD), dict(gpu_count=8, dcgmi_installed=True),
     "failed", "dcgmi failed (rc=137)"),
    ("dcgmi that cannot start fails with the error", command_not_executable(
        "dcgmi diag -r 1", "[Errno 2] No such file or directory: b'dcgmi'"),
     dict(gpu_count=8, dcgmi_installed=True), "failed", "[Errno 2] No such file or directory: b'dcgmi'"),
]


@pytest.mark.parametrize("name, result, kwargs, status, reason", DCGM_CASES, ids=[c[0] for c in DCGM_CASES])
def test_dcgm_diag_verdict(name, result, kwargs, status, reason):
    got = vd.dcgm_diag_verdict(result, **kwargs)
    assert (got["status"], got["reason"]) == (status, reason)


def test_dcgm_results_per_test_and_entity():
    results, failing = vd.dcgm_diag_results(DCGM3_FAIL)
    assert failing == ["Persistence Mode", "GPU Memory"]
    assert results["GPU Memory"] == ["Pass - GPU: 1", "Fail - GPU: 0"]
    assert "Warning" not in results and "DCGM Version" not in results
    results, failing = vd.dcgm_diag_results(DCGM4_FAIL)
    assert results == {"software": ["Pass", "GPU0: Pass", "GPU1: Pass"], "memory": ["Fail", "GPU0: Pass", "GPU1: Fail"]}
    assert vd.dcgm_diag_results(DCGM4_WARN)[1] == []
    detail = vd.dcgm_diag_verdict(command(226, DCGM4_FAIL), gpu_count=2, dcgmi_installed=True)["detail"]
    assert detail["rc"] == 226 and detail["failed_tests"] == ["memory"]
    assert vd.dcgm_diag_verdict(DCGM_SKIPPED, enabled=False)["detail"] == {}


def test_dcgm_table_rows_are_dcgmi_width():
    assert all(len(line) == len(BORDER) for line in DCGM3_FAIL.splitlines()[1:])


# ---------------------------------------------------------------------------------------------------------
# sshd_audit

SSH_AUDIT_CMD = ["/work/.venv/bin/ssh-audit", "--no-colors", "--skip-rate-test", "-p", "22", "10.20.0.11"]
SSH_CLEAN = ("# general\n(gen) banner: SSH-2.0-OpenSSH_10.0p2 Debian-7\n(gen) software: OpenSSH 10.0p2\n"
             "(gen) compression: disabled\n\n# key exchange algorithms\n"
             "(kex) mlkem768x25519-sha256               -- [info] available since OpenSSH 9.9\n"
             "(kex) sntrup761x25519-sha512              -- [info] available since OpenSSH 8.5\n")
SSH_WARN = SSH_CLEAN + (
    "(kex) ecdh-sha2-nistp256                   -- [fail] using elliptic curves that are suspected as being "
    "backdoored by the U.S. National Security Agency\n"
    "(mac) umac-64-etm@openssh.com              -- [warn] using small 64-bit tag size\n")
SSH_REFUSED = "(gen) ... [exception] [Errno 111] Connection refused\n"

SSHD_CASES = [
    ("check off is skipped", skipped("validate_ssh_audit"), skipped("validate_ssh_audit"), False, "skipped",
     "check off"),
    ("ssh-audit nowhere is skipped", skipped("validate_ssh_audit_controller.stat.exists"),
     skipped("validate_ssh_audit_node.stat.exists | default(false)"), True, "skipped",
     "ssh-audit is installed neither on the controller nor on the node"),
    ("clean from the controller passes", command(0, SSH_CLEAN, cmd=SSH_AUDIT_CMD),
     skipped("not validate_ssh_audit_controller.stat.exists"), True, "passed", "ssh-audit: no failure, no warning"),
    ("clean from the node passes", skipped("validate_ssh_audit_controller.stat.exists"),
     command(0, SSH_CLEAN), True, "passed", "ssh-audit: no failure, no warning"),
    ("fail and warn lines are the reason", command(2, SSH_WARN, cmd=SSH_AUDIT_CMD), skipped("x"), True, "failed",
     "(kex) ecdh-sha2-nistp256                   -- [fail] using elliptic curves that are suspected as being "
     "backdoored by the U.S. National Security Agency; "
     "(mac) umac-64-etm@openssh.com              -- [warn] using small 64-bit tag size"),
    ("a connection error fails with its last line", command(3, SSH_REFUSED, cmd=SSH_AUDIT_CMD), skipped("x"), True,
     "failed", "(gen) ... [exception] [Errno 111] Connection refused"),
    ("stderr is the tool's last word", command(1, "", "usage: ssh-audit [options] <host>\nerror: bad port\n"),
     skipped("x"), True, "failed", "error: bad port"),
    ("a silent non-zero exit says so", command(3, cmd=SSH_AUDIT_CMD), skipped("x"), True, "failed",
     "ssh-audit failed (rc=3)"),
]


@pytest.mark.parametrize("name, remote, local, enabled, status, reason", SSHD_CASES, ids=[c[0] for c in SSHD_CASES])
def test_sshd_audit_verdict(name, remote, local, enabled, status, reason):
    got = vd.sshd_audit_verdict(remote, local, enabled)
    assert (got["status"], got["reason"]) == (status, reason)


def test_sshd_audit_detail_says_where_it_ran():
    assert vd.sshd_audit_verdict(skipped("x"), command(0, SSH_CLEAN))["detail"] == {
        "from": "node", "rc": 0, "findings": []}
    detail = vd.sshd_audit_verdict(command(2, SSH_WARN), skipped("x"))["detail"]
    assert detail["from"] == "controller" and detail["rc"] == 2 and len(detail["findings"]) == 2


# ---------------------------------------------------------------------------------------------------------
# exporters

METRICS = ("# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter\n"
           "node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 81234.56\n")
URL = "http://127.0.0.1:9100/metrics"


def uri_ok(content):
    """What ansible.builtin.uri registers for a 200 with return_content."""
    return {"changed": False, "connection": "close", "content": content, "content_length": str(len(content)),
            "content_type": "text/plain; version=0.0.4; charset=utf-8", "cookies": {}, "cookies_string": "",
            "date": "Sun, 29 Nov 2026 21:58:00 GMT", "elapsed": 0, "failed": False,
            "msg": "OK (%d bytes)" % len(content), "redirected": False, "status": 200, "url": URL}


def uri_failed(status, msg):
    return {"changed": False, "content": "", "elapsed": 0, "failed": False, "failed_when_result": False,
            "msg": msg, "redirected": False, "status": status, "url": URL}


def unit(active, load="loaded", sub=None):
    """What ansible.builtin.systemd_service registers for a unit it only looked at."""
    return {"changed": False, "failed": False, "name": "dcgm-exporter.service",
            "status": {"ActiveState": active, "LoadState": load, "SubState": sub or
                       {"active": "running", "inactive": "dead", "failed": "failed"}.get(active, active),
                       "Id": "dcgm-exporter.service"}}


REFUSED = uri_failed(-1, "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] "
                         "Connection refused>")
NO_GPU = skipped("validate_gpu_count | int > 0")

EXPORTER_CASES = [
    ("node_exporter up, no GPU passes", uri_ok(METRICS), NO_GPU, "passed",
     "node_exporter up, dcgm-exporter skipped: no NVIDIA GPU"),
    ("both up passes", uri_ok(METRICS), unit("active"), "passed", "node_exporter up, dcgm-exporter active"),
    ("node_exporter refused fails with uri's message", REFUSED, NO_GPU, "failed",
     "node_exporter not answering (%s), dcgm-exporter skipped: no NVIDIA GPU" % REFUSED["msg"]),
    ("a 200 without node metrics fails, said plainly", uri_ok("<html>hello</html>"), NO_GPU, "failed",
     "node_exporter answered without node metrics (no node_cpu_seconds_total), dcgm-exporter skipped: no NVIDIA GPU"),
    ("a 404 fails with uri's message", uri_failed(404, "Status code was 404 and not [200]: HTTP Error 404: Not Found"),
     unit("active"), "failed",
     "node_exporter not answering (Status code was 404 and not [200]: HTTP Error 404: Not Found), "
     "dcgm-exporter active"),
    ("a probe without message gives the status", uri_failed(503, ""), NO_GPU, "failed",
     "node_exporter not answering (HTTP 503), dcgm-exporter skipped: no NVIDIA GPU"),
    ("dcgm-exporter failed fails", uri_ok(METRICS), unit("failed"), "failed", "node_exporter up, dcgm-exporter failed"),
    ("dcgm-exporter still starting fails", uri_ok(METRICS), unit("activating", sub="start"), "failed",
     "node_exporter up, dcgm-exporter activating"),
    ("no dcgm-exporter unit is not installed", uri_ok(METRICS), unit("inactive", load="not-found"), "failed",
     "node_exporter up, dcgm-exporter not installed"),
    ("systemd unreachable fails with the module's message", uri_ok(METRICS),
     module_failed(msg="Service is in unknown state", status={}), "failed",
     "node_exporter up, dcgm-exporter state unknown (Service is in unknown state)"),
]


@pytest.mark.parametrize("name, node, dcgm, status, reason", EXPORTER_CASES, ids=[c[0] for c in EXPORTER_CASES])
def test_exporters_verdict(name, node, dcgm, status, reason):
    got = vd.exporters_verdict(node, dcgm)
    assert (got["status"], got["reason"]) == (status, reason)


def test_exporters_detail():
    assert vd.exporters_verdict(uri_ok(METRICS), NO_GPU)["detail"] == {
        "node_exporter": {"url": URL, "status": 200}, "dcgm_exporter": None}
    assert vd.exporters_verdict(REFUSED, unit("failed"))["detail"]["dcgm_exporter"] == "failed"


# ---------------------------------------------------------------------------------------------------------
# shared rules


ALL_CASES = ([(vd.topology_verdict, (c[1],), {}, c[2]) for c in TOPOLOGY_CASES]
             + [(vd.pcie_verdict, (c[1],), c[2], c[3]) for c in PCIE_CASES]
             + [(vd.fabric_verdict, (c[1],), {}, c[2]) for c in FABRIC_CASES]
             + [(vd.image_verdict, (c[1], c[2], c[3]), {}, c[4]) for c in IMAGE_CASES]
             + [(vd.dcgm_diag_verdict, (c[1],), c[2], c[3]) for c in DCGM_CASES]
             + [(vd.sshd_audit_verdict, (c[1], c[2], c[3]), {}, c[4]) for c in SSHD_CASES]
             + [(vd.exporters_verdict, (c[1], c[2]), {}, c[3]) for c in EXPORTER_CASES])


@pytest.mark.parametrize("func, args, kwargs, status", ALL_CASES)
def test_every_verdict_has_the_record_shape(func, args, kwargs, status):
    got = func(*args, **kwargs)
    assert sorted(got) == ["detail", "reason", "status"]
    assert got["status"] == status and got["status"] in ("passed", "failed", "skipped")
    assert isinstance(got["reason"], str) and got["reason"] and "\n" not in got["reason"]
    assert isinstance(got["detail"], dict)


NOT_RUN = [
    (vd.topology_verdict, (skipped("x"),), "gpu_topology did not run"),
    (vd.fabric_verdict, (None,), "rdma_facts did not run"),
    (vd.image_verdict, (None, IMAGE, True), "signature check did not run (skipped)"),
    (vd.dcgm_diag_verdict, (skipped("x"), True, 8, True), "dcgmi diag did not run (Conditional result was False)"),
    (vd.sshd_audit_verdict, (None, None), "ssh-audit is installed neither on the controller nor on the node"),
    (vd.exporters_verdict, (skipped("x"), None), "node_exporter probe did not run"),
]


@pytest.mark.parametrize("func, args, reason", NOT_RUN)
def test_a_check_that_did_not_run_is_skipped_never_passed(func, args, reason):
    got = func(*args)
    assert (got["status"], got["reason"]) == ("skipped", reason)


def test_one_line_and_last_line():
    assert vd.one_line("RDMA expectations not met:\na\n\nb\n") == "RDMA expectations not met: a; b"
    assert vd.one_line("a\nb") == "a; b"
    assert vd.last_line(command(1, "text\n" + BORDER + "\n\n")) == "text"
    assert vd.last_line(command(1), "nothing") == "nothing"


def test_filter_plugin_exposes_one_filter_per_step():
    assert filters.FilterModule().filters() == {
        "topology_verdict": vd.topology_verdict, "pcie_verdict": vd.pcie_verdict, "fabric_verdict": vd.fabric_verdict,
        "image_verdict": vd.image_verdict, "dcgm_diag_verdict": vd.dcgm_diag_verdict,
        "sshd_audit_verdict": vd.sshd_audit_verdict, "exporters_verdict": vd.exporters_verdict}


STEP_FILES = [("topology.yml", "topology"), ("pcie.yml", "pcie"), ("fabric.yml", "fabric"), ("image.yml", "image"),
              ("dcgm.yml", "dcgm_diag"), ("ssh_audit.yml", "sshd_audit"), ("exporters.yml", "exporters")]


@pytest.mark.parametrize("path, step", STEP_FILES)
def test_task_file_records_its_step_once_from_its_filter(path, step):
    with open(os.path.join(TASKS, path)) as handle:
        tasks = yaml.safe_load(handle)
    records = [t for t in tasks if t.get("ansible.builtin.include_tasks") == "record.yml"]
    assert len(records) == 1
    rvars = records[0]["vars"]
    assert rvars["validate_step"] == step
    assert "gpufleet.cluster.%s_verdict" % step in rvars["validate_step_verdict"]
    assert sorted(rvars) == ["validate_step", "validate_step_verdict"]


def test_every_step_records_its_verdict_one_way():
    # validate_verdict is the node's verdict (report.yml); a step hands record.yml validate_step_verdict.
    for name in sorted(os.listdir(TASKS)):
        with open(os.path.join(TASKS, name)) as handle:
            tasks = yaml.safe_load(handle)
        for task in tasks:
            if task.get("ansible.builtin.include_tasks") == "record.yml":
                assert set(task["vars"]) - {"validate_seen", "validate_fabric_state"} == \
                    {"validate_step", "validate_step_verdict"}, name
            assert "validate_verdict" not in (task.get("vars") or {}), name
    with open(os.path.join(TASKS, "report.yml")) as handle:
        assert "validate_verdict" in yaml.safe_load(handle)[0]["ansible.builtin.set_fact"]
