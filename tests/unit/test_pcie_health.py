"""PCIe link and ACS checks in module_utils/pcie_health.py over real lspci -vvv outputs (tests/fixtures/lspci) and
sysfs values (tests/fixtures/sysfs, and published ones written to tmp_path where a test cites them)."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import pcie_health

from conftest import FIXTURES, fixture_parts

E12 = "asus-esc8000a-e12-rtx6000ada-cx7-idle.txt"
E13P = "asus-esc8000a-e13p-pex890xx-rtx-pro-6000-idle.txt"
MILAN = "milan-gpp-bridges-acs-redirect.txt"

ACS_ALL_OFF = {"SrcValid": False, "TransBlk": False, "ReqRedir": False, "CmpltRedir": False, "UpstreamFwd": False,
               "EgressCtrl": False, "DirectTrans": False}
RTX6000ADA = "NVIDIA Corporation AD102GL [RTX 6000 Ada Generation] (rev a1)"
HIGHPOINT = "HighPoint Technologies, Inc. SSD7540 PCIe Gen4 x16 8-Port M.2 NVMe RAID Controller (rev 01)"
PEX890XX = "Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)"
MILAN_GPP = "Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge"


def load(name):
    """The published text of a fixture, without its source header."""
    header, body = fixture_parts("lspci", name)
    assert header[0].startswith("# source: https://"), "%s does not name its source" % name
    return body


def devices(name):
    return dict((device["address"], device) for device in pcie_health.parse_lspci_vvv(load(name)))


def link(speed, width, speed_marker=None, width_marker=None):
    return {"speed_gts": speed, "width": width, "speed_marker": speed_marker, "width_marker": width_marker}


def test_every_fixture_names_its_source():
    names = sorted(name for name in os.listdir(os.path.join(FIXTURES, "lspci")) if name.endswith(".txt"))
    assert names == sorted([E12, E13P, MILAN])
    for name in names:
        assert load(name)


def test_e12_devices_through_the_markdown_around_them():
    """Prompt lines, fences and labels between the devices are skipped; every device block is read."""
    found = devices(E12)
    assert list(found) == ["0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0",
                           "0000:21:00.0", "0000:81:00.0", "0000:71:00.0", "0000:b1:00.0"]
    gpu = found["0000:01:00.0"]
    assert gpu == {
        "address": "0000:01:00.0",
        "class": "VGA compatible controller",
        "class_id": "0300",
        "description": RTX6000ADA + " (prog-if 00 [VGA controller])",
        "vendor_id": "10de",
        "device_id": None,
        "revision": "a1",
        "link_cap": link(16.0, 16),
        "link_status": link(2.5, 16, speed_marker="downgraded"),
        "acs_cap": None,
        "acs_ctl": None,
        "driver": "nvidia",
    }
    nic = found["0000:21:00.0"]
    assert (nic["class"], nic["class_id"], nic["vendor_id"]) == ("Ethernet controller", "0200", "15b3")
    assert nic["description"] == "Mellanox Technologies MT2910 Family [ConnectX-7]"
    assert nic["link_cap"] == nic["link_status"] == link(32.0, 16)
    assert nic["acs_ctl"] == ACS_ALL_OFF
    assert nic["driver"] == "mlx5_core"
    board = found["0000:71:00.0"]
    assert (board["class_id"], board["vendor_id"], board["driver"]) == ("0104", None, None)
    assert board["link_cap"] == link(5.0, 2)
    assert board["link_status"] == link(5.0, 1, width_marker="downgraded")


def test_idle_gpus_lower_speed_is_a_note_and_a_full_nic_link_is_healthy():
    result = pcie_health.link_problems(pcie_health.parse_lspci_vvv(load(E12)))
    assert result["problems"] == []
    assert [(note["address"], note["kind"], note["what"], note["current"], note["capable"])
            for note in result["notes"]] == [(address, "GPU", "speed", 2.5, 16.0) for address in
                                             ("0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0")]
    assert result["notes"][0]["message"] == (
        "GPU 0000:01:00.0 (%s): link speed 2.5GT/s, capable of 16GT/s - may be power saving while idle, "
        "check again under load" % RTX6000ADA)
    flagged = set(item["address"] for item in result["problems"] + result["notes"])
    assert not flagged & {"0000:21:00.0", "0000:81:00.0"}, "ConnectX-7 at 32GT/s x16 of 32GT/s x16 is healthy"
    assert pcie_health.acs_problems(pcie_health.parse_lspci_vvv(load(E12))) == []


def test_a_narrower_link_is_a_problem_for_the_classes_asked_for():
    """The carrier boards are no GPU or NIC, so only a class list naming them looks at them: x1 of x2 is a
    width problem, the equal speed none."""
    parsed = pcie_health.parse_lspci_vvv(load(E12))
    result = pcie_health.link_problems(parsed, classes=((None, "0104", "NVMe carrier board"),))
    assert result["notes"] == []
    assert result["problems"] == [
        {"address": address, "kind": "NVMe carrier board", "name": HIGHPOINT, "what": "width", "current": 1,
         "capable": 2, "message": "NVMe carrier board %s (%s): link width x1, capable of x2" % (address, HIGHPOINT)}
        for address in ("0000:71:00.0", "0000:b1:00.0")]


def test_e13p_switch_ports_and_gpus():
    found = devices(E13P)
    assert list(found) == ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0", "0000:02:01.0", "0000:02:02.0",
                           "0000:02:03.0", "0000:02:04.0", "0000:02:1f.0", "0000:03:00.0", "0000:04:00.0",
                           "0000:05:00.0", "0000:06:00.0", "0000:07:00.0"]
    root_port = found["0000:00:01.1"]
    assert (root_port["class"], root_port["class_id"], root_port["driver"]) == ("PCI bridge", "0604", "pcieport")
    assert root_port["link_cap"] == root_port["link_status"] == link(32.0, 16)
    assert root_port["acs_cap"]["ReqRedir"] is True and root_port["acs_ctl"]["ReqRedir"] is False
    assert found["0000:01:00.0"]["description"] == PEX890XX + " (prog-if 00 [Normal decode])"
    assert found["0000:01:00.0"]["acs_ctl"] is None, "the switch's upstream port has no ACS capability"
    port = found["0000:02:03.0"]
    assert port["acs_ctl"] == dict(ACS_ALL_OFF, SrcValid=True, UpstreamFwd=True)
    assert (port["link_cap"], port["link_status"]) == (link(32.0, 16), link(2.5, 16))
    assert found["0000:03:00.0"]["class"] == "System peripheral" and found["0000:03:00.0"]["class_id"] is None
    for address in ("0000:06:00.0", "0000:07:00.0"):
        gpu = found[address]
        assert (gpu["class"], gpu["class_id"], gpu["vendor_id"], gpu["driver"]) == (
            "3D controller", "0302", "10de", "nvidia")
        assert gpu["description"] == "NVIDIA Corporation Device 2bb5 (rev a1)"
        assert gpu["link_cap"] == link(32.0, 16)
        assert gpu["link_status"] == link(2.5, 16, speed_marker="downgraded")


def test_e13p_is_healthy_apart_from_the_idle_gpus():
    parsed = pcie_health.parse_lspci_vvv(load(E13P))
    assert pcie_health.acs_problems(parsed) == []
    result = pcie_health.link_problems(parsed)
    assert result["problems"] == []
    assert [(note["address"], note["what"], note["current"], note["capable"]) for note in result["notes"]] == [
        ("0000:06:00.0", "speed", 2.5, 32.0), ("0000:07:00.0", "speed", 2.5, 32.0)]


def test_a_slower_link_is_a_problem_on_anything_but_an_nvidia_gpu():
    """The switch ports the idle GPUs hang off trained at 2.5GT/s of 32GT/s: counted as ports, that is a problem
    (only an NVIDIA GPU gets the power-saving note); the ports at full speed and the x4 ports at x4 are fine."""
    parsed = pcie_health.parse_lspci_vvv(load(E13P))
    result = pcie_health.link_problems(parsed, classes=((None, "0604", "PCIe port"),))
    assert result["notes"] == []
    assert [(problem["address"], problem["what"], problem["current"], problem["capable"])
            for problem in result["problems"]] == [("0000:02:03.0", "speed", 2.5, 32.0),
                                                   ("0000:02:04.0", "speed", 2.5, 32.0)]
    assert result["problems"][0]["message"] == (
        "PCIe port 0000:02:03.0 (%s): link speed 2.5GT/s, capable of 32GT/s" % PEX890XX)


def test_milan_bridges_with_acs_redirect():
    found = devices(MILAN)
    assert list(found) == ["0000:40:01.1", "0000:40:01.2", "0000:40:01.3"]
    first = found["0000:40:01.1"]
    assert (first["class_id"], first["link_cap"], first["link_status"], first["driver"]) == ("0604", None, None, None)
    assert first["acs_cap"] == {"SrcValid": True, "TransBlk": True, "ReqRedir": True, "CmpltRedir": True,
                                "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": True}
    assert first["acs_ctl"] == dict(ACS_ALL_OFF, ReqRedir=True, CmpltRedir=True, UpstreamFwd=True)
    assert found["0000:40:01.3"]["acs_ctl"]["SrcValid"] is True
    problems = pcie_health.acs_problems(list(found.values()))
    assert [(problem["address"], problem["name"], problem["redirect"]) for problem in problems] == [
        (address, MILAN_GPP, ["ReqRedir", "CmpltRedir"]) for address in ("0000:40:01.1", "0000:40:01.2",
                                                                         "0000:40:01.3")]
    assert problems[0]["message"] == (
        "PCI bridge 0000:40:01.1 (%s): ACS ReqRedir+ CmpltRedir+ on - peer-to-peer traffic below it goes through "
        "the root complex" % MILAN_GPP)
    assert pcie_health.link_problems(list(found.values())) == {"problems": [], "notes": []}


def test_no_output_no_devices():
    assert pcie_health.parse_lspci_vvv("") == []
    assert pcie_health.parse_lspci_vvv(None) == []
    assert pcie_health.link_problems([]) == {"problems": [], "notes": []}
    assert pcie_health.acs_problems(None) == []


H200_VM_GPU = os.path.join(FIXTURES, "sysfs", "h200_vm", "sys", "bus", "pci", "devices", "0000:00:06.0")


def test_sysfs_link_of_the_recorded_h200():
    """The H200 VM's GPU as captured: its current link, but no max_link_* files (the capture copied none), so the
    link cannot be compared and is a note."""
    device = pcie_health.sysfs_link(H200_VM_GPU)
    assert device == {
        "address": "0000:00:06.0",
        "class": "3D controller",
        "class_id": "0302",
        "description": None,
        "vendor_id": "10de",
        "device_id": "2335",
        "revision": None,
        "link_cap": None,
        "link_status": link(32.0, 16),
        "acs_cap": None,
        "acs_ctl": None,
        "driver": "nvidia",
    }
    assert pcie_health.link_problems([device]) == {"problems": [], "notes": [{
        "address": "0000:00:06.0", "kind": "GPU", "name": "3D controller", "what": "link", "current": None,
        "capable": None, "message": "GPU 0000:00:06.0 (3D controller): link capability not known, not checked"}]}


def write_link(device_dir, values):
    os.makedirs(device_dir)
    for name, value in values.items():
        with open(os.path.join(device_dir, name), "w") as handle:
            handle.write(value + "\n")


# `tail -v -n +1 /sys/bus/pci/devices/0000\:0N\:00.0/*_link_*` as posted in
# https://github.com/nokyan/resources/issues/512 (2025-07-16), an AMD GPU (amdgpu's pp_dpm_pcie shown beside it)
# whose link to the slot, 0000:01:00.0, trained at 16.0 GT/s x8 while the one inside the card, 0000:03:00.0,
# runs at its full 32.0 GT/s x16.
NOKYAN_512 = {
    "0000:01:00.0": {"current_link_speed": "16.0 GT/s PCIe", "current_link_width": "8",
                     "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"},
    "0000:03:00.0": {"current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
                     "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"},
}


@pytest.mark.parametrize("address, current, capable, below", [
    ("0000:01:00.0", link(16.0, 8), link(32.0, 16), (True, True)),
    ("0000:03:00.0", link(32.0, 16), link(32.0, 16), (False, False)),
])
def test_sysfs_link_compares_like_lspci(tmp_path, address, current, capable, below):
    device_dir = str(tmp_path / address)
    write_link(device_dir, NOKYAN_512[address])
    device = pcie_health.sysfs_link(device_dir)
    assert (device["address"], device["link_status"], device["link_cap"]) == (address, current, capable)
    assert (device["vendor_id"], device["class_id"], device["driver"]) == (None, None, None)
    assert pcie_health.compare_link(device["link_cap"], device["link_status"]) == below


@pytest.mark.parametrize("text, speed", [
    # The kernel's pci_speed_string() (drivers/pci/probe.c) prints "Unknown" for a speed it has no name for.
    ("Unknown", None),
    # Kernels up to 5.6 printed the speed without " PCIe" and without the ".0", as NVIDIA's NCCL notes in
    # src/graph/topo.cc (kvDictPciGen: {"8 GT/s", 60}, ... /* Kernel 5.6 and earlier */).
    ("8 GT/s", 8.0),
])
def test_sysfs_speed_texts(tmp_path, text, speed):
    device_dir = str(tmp_path / "0000:00:06.0")
    write_link(device_dir, {"current_link_speed": text})
    assert pcie_health.sysfs_link(device_dir)["link_status"] == link(speed, None)
    assert pcie_health.sysfs_link(device_dir)["link_cap"] is None
