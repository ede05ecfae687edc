"""node_facts / sysfs readers on sysfs trees laid out like the kernel's.

Device ids and classes are those the PCI ID database (pci.ids) lists for the parts named, and the file
layout is the kernel's (Documentation/ABI/testing/sysfs-bus-pci): one directory per BDF holding
`vendor`, `device`, `class`, `numa_node`, and a `driver` symlink.
"""
import os
import shutil

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import sysfs
from ansible_collections.gpufleet.cluster.plugins.modules import node_facts

from module_harness import patch_module, run_main

DEBIAN_13 = """PRETTY_NAME="Debian GNU/Linux 13 (trixie)"
NAME="Debian GNU/Linux"
VERSION_ID="13"
VERSION="13 (trixie)"
VERSION_CODENAME=trixie
DEBIAN_VERSION_FULL=13.2
ID=debian
HOME_URL="https://www.debian.org/"
"""

UBUNTU_2404 = """PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.1 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
"""

ROCKY_9 = """NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
"""

UBUNTU_2004 = """NAME="Ubuntu"
VERSION="20.04.6 LTS (Focal Fossa)"
ID=ubuntu
ID_LIKE=debian
PRETTY_NAME="Ubuntu 20.04.6 LTS"
VERSION_ID="20.04"
VERSION_CODENAME=focal
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def pci(root, bdf, vendor, device, cls, numa=0, driver=None):
    base = os.path.join(root, "sys/bus/pci/devices", bdf)
    write(os.path.join(base, "vendor"), vendor + "\n")
    write(os.path.join(base, "device"), device + "\n")
    write(os.path.join(base, "class"), cls + "\n")
    write(os.path.join(base, "numa_node"), "%d\n" % numa)
    if driver:
        drivers = os.path.join(root, "sys/bus/pci/drivers", driver)
        os.makedirs(drivers, exist_ok=True)
        os.symlink(os.path.relpath(drivers, base), os.path.join(base, "driver"))


@pytest.fixture
def hgx_h100(tmp_path):
    """An HGX H100 8-GPU baseboard: 8x GH100 [H100 SXM5 80GB] (10de:2330, 3D controller 0x030200),
    4 NVSwitches (10de:22a3, bridge 0x068000), a ConnectX-7 (15b3:1021) per GPU pair, an ASPEED VGA."""
    root = str(tmp_path)
    gpu_bdfs = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    for index, bdf in enumerate(gpu_bdfs):
        pci(root, bdf, "0x10de", "0x2330", "0x030200", numa=0 if index < 4 else 1, driver="nvidia")
    for index in range(4):
        pci(root, "0000:0%d:00.0" % (5 + index), "0x10de", "0x22a3", "0x068000", numa=0, driver="nvidia-nvswitch")
    pci(root, "0000:1a:00.0", "0x15b3", "0x1021", "0x020700", numa=0, driver="mlx5_core")
    pci(root, "0000:03:00.0", "0x1a03", "0x2000", "0x030000", numa=0, driver="ast")
    write(os.path.join(root, "etc/os-release"), UBUNTU_2404)
    return root


def test_hgx_h100_counts_gpus_and_nvswitches(hgx_h100):
    facts = node_facts.gather(hgx_h100, os.path.join(hgx_h100, "etc/os-release"))
    assert facts["gpu_count"] == 8
    assert facts["nvswitch"] is True
    assert facts["nvswitch_count"] == 4
    assert facts["gpus_turing_or_newer"] is True
    assert [g["numa_node"] for g in facts["nvidia_gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert facts["nvidia_gpus"][0] == {
        "bdf": "0000:18:00.0", "vendor": "0x10de", "device": "0x2330", "class": "0x030200",
        "numa_node": 0, "driver": "nvidia"}
    assert facts["os"]["id"] == "ubuntu" and facts["os"]["major"] == "24.04"
    assert facts["os_supported"] is True
    # The ASPEED BMC VGA is not an NVIDIA device and must not count.
    assert all(g["vendor"] == "0x10de" for g in facts["nvidia_gpus"])


def test_volta_is_not_turing(tmp_path):
    root = str(tmp_path)
    # GV100GL [Tesla V100 SXM2 16GB] is 10de:1db1.
    pci(root, "0000:06:00.0", "0x10de", "0x1db1", "0x030200")
    gpus, switches, turing = sysfs.classify_nvidia(sysfs.read_pci_devices(root))
    assert len(gpus) == 1 and not switches and turing is False


def test_mixed_generations_are_not_all_turing(tmp_path):
    root = str(tmp_path)
    pci(root, "0000:06:00.0", "0x10de", "0x1db1", "0x030200")  # V100
    pci(root, "0000:07:00.0", "0x10de", "0x1eb8", "0x030200")  # TU104GL [Tesla T4]
    assert sysfs.classify_nvidia(sysfs.read_pci_devices(root))[2] is False


def test_no_sysfs_means_no_devices(tmp_path):
    facts = node_facts.gather(str(tmp_path), os.path.join(str(tmp_path), "etc/os-release"))
    assert facts["gpu_count"] == 0 and facts["hca_count"] == 0 and not facts["nvswitch"]
    assert facts["os_supported"] is False
    assert "unsupported operating system 'unknown'" in facts["os_problem"]


@pytest.mark.parametrize("text,expected_id,expected_major,supported", [
    (DEBIAN_13, "debian", "13", True),
    (UBUNTU_2404, "ubuntu", "24.04", True),
    (ROCKY_9, "rocky", "9", True),
    (UBUNTU_2004, "ubuntu", "20.04", False),
])
def test_os_release_support(text, expected_id, expected_major, supported):
    summary = sysfs.os_summary(sysfs.parse_os_release(text))
    assert summary["id"] == expected_id
    assert summary["major"] == expected_major
    problem = sysfs.os_support_problem(summary)
    assert (problem is None) is supported
    if not supported:
        assert "unsupported ubuntu version '20.04'" in problem
        assert "ubuntu 22.04/24.04" in problem


def test_os_family_from_id_like():
    summary = sysfs.os_summary(sysfs.parse_os_release(ROCKY_9))
    assert summary["family"] == "RedHat"
    assert summary["codename"] == ""


def test_secure_boot_from_efivar(tmp_path):
    root = str(tmp_path)
    path = os.path.join(root, sysfs.SECURE_BOOT_EFIVAR)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(b"\x06\x00\x00\x00\x01")  # attributes (NV+BS+RT), then 1 = enabled
    assert sysfs.secure_boot_from_efivars(root) == "enabled"
    with open(path, "wb") as handle:
        handle.write(b"\x06\x00\x00\x00\x00")
    assert sysfs.secure_boot_from_efivars(root) == "disabled"


def test_secure_boot_unknown_without_efi(tmp_path):
    assert sysfs.secure_boot_from_efivars(str(tmp_path)) == "unknown"


@pytest.mark.parametrize("text,state", [
    ("SecureBoot enabled\n", "enabled"),
    ("SecureBoot disabled\nPlatform is in Setup Mode\n", "disabled"),
    ("EFI variables are not supported on this system\n", "unknown"),
])
def test_secure_boot_from_mokutil(text, state):
    assert sysfs.secure_boot_from_mokutil(text) == state


def test_container_detection(tmp_path):
    root = str(tmp_path)
    assert sysfs.detect_container(root) is None
    write(os.path.join(root, ".dockerenv"), "")
    assert sysfs.detect_container(root) == "docker"
    write(os.path.join(root, "run/systemd/container"), "podman\n")
    assert sysfs.detect_container(root) == "podman"


def test_infiniband_port_strings():
    port = sysfs.parse_port("1", state="4: ACTIVE", phys_state="5: LinkUp",
                            rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand")
    assert port == {"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400.0,
                    "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}


def test_captured_h200_vm_tree(tmp_path):
    """PCI attributes copied from an H200 node by scripts/capture-gpu-node.sh (tests/fixtures/sysfs/README.md):
    the same nvidia_gpus node_facts returned on that machine."""
    root = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sysfs", "h200_vm")
    os_release = tmp_path / "os-release"
    os_release.write_text(UBUNTU_2404)
    facts = node_facts.gather(root, str(os_release))
    assert facts["nvidia_gpus"] == [{"bdf": "0000:00:06.0", "vendor": "0x10de", "device": "0x2335",
                                     "class": "0x030200", "numa_node": -1, "driver": "nvidia"}]
    assert facts["gpu_count"] == 1
    assert facts["gpus_turing_or_newer"] is True
    assert facts["nvswitch"] is False
    assert facts["hca_count"] == 0


def test_module_returns_the_facts_and_no_packages_unless_asked(tmp_path, monkeypatch):
    """Without packages the call returns the gpufleet_node fact and nothing else of the node."""
    def no_commands(module, args, **kwargs):
        raise AssertionError("no command runs with use_mokutil off: %s" % args)

    patch_module(monkeypatch, no_commands)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text(DEBIAN_13)
    result = run_main(node_facts.main, dict(root=str(tmp_path), use_mokutil=False))
    assert result["ansible_facts"]["gpufleet_node"]["os"]["id"] == "debian"
    assert "packages" not in result and "python_executable" not in result


# ---- the PCIe links of the GPUs and NICs (gpufleet_node.pcie) --------------------------------------------------

SYSFS_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sysfs")


def sysfs_link_text(speed, width):
    """current_/max_link_speed and _width as the kernel prints them (pci_speed_string(): "16.0 GT/s PCIe")."""
    return {"speed": "%.1f GT/s PCIe" % speed, "width": "%d" % width}


# The links of the ASUS ESC8000A-E12 as its report's `lspci -vvv` printed them (tests/fixtures/lspci/
# asus-esc8000a-e12-rtx6000ada-cx7-idle.txt, the machine of tests/fixtures/sysfs/asus_esc8000a_e12/): each idle
# RTX 6000 Ada at LnkSta 2.5GT/s x16 of LnkCap 16GT/s x16, each ConnectX-7 at 32GT/s x16 of 32GT/s x16. lspci was run
# on function 0 of each ConnectX-7; function 1 is the same device on the same link, so it gets the same values.
E12_LINKS = dict(
    [(address, {"current": sysfs_link_text(2.5, 16), "max": sysfs_link_text(16.0, 16)})
     for address in ("0000:01:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:e1:00.0")]
    + [(address, {"current": sysfs_link_text(32.0, 16), "max": sysfs_link_text(32.0, 16)})
       for address in ("0000:21:00.0", "0000:21:00.1", "0000:81:00.0", "0000:81:00.1")])

# The link of nokyan/resources#512's card at 0000:01:00.0 as sysfs printed it (tests/unit/test_pcie_health.py,
# NOKYAN_512): trained at 16.0 GT/s x8 in a slot that gives it 32.0 GT/s x16.
NOKYAN_512_SLOT = {"current": {"speed": "16.0 GT/s PCIe", "width": "8"},
                   "max": {"speed": "32.0 GT/s PCIe", "width": "16"}}


def e12_with_links(tmp_path, links=None):
    """A copy of tests/fixtures/sysfs/asus_esc8000a_e12 with the link files of E12_LINKS (and ``links``, by
    address, over them) in each device's directory; the root of the copy."""
    root = str(tmp_path / "e12")
    shutil.copytree(os.path.join(SYSFS_FIXTURES, "asus_esc8000a_e12"), root, symlinks=True)
    for address, link in dict(E12_LINKS, **(links or {})).items():
        for side in ("current", "max"):
            for what in ("speed", "width"):
                write(os.path.join(root, "sys/bus/pci/devices", address, "%s_link_%s" % (side, what)),
                      link[side][what] + "\n")
    return root


def link(speed, width):
    return {"speed_gts": speed, "width": width, "speed_marker": None, "width_marker": None}


def test_pcie_links_of_the_recorded_h200():
    """The captured H200's GPU: its current link, no max_link_* files (the capture copied none)."""
    facts = node_facts.gather(os.path.join(SYSFS_FIXTURES, "h200_vm"), os.path.join(SYSFS_FIXTURES, "none"))
    assert facts["pcie"] == [{
        "address": "0000:00:06.0", "kind": "GPU", "class": "3D controller", "class_id": "0302",
        "description": None, "vendor_id": "10de", "device_id": "2335", "revision": None,
        "link_cap": None, "link_status": link(32.0, 16), "acs_cap": None, "acs_ctl": None, "driver": "nvidia"}]


KVM_GUEST_HCAS = ("0000:26:00.0", "0000:46:00.0", "0000:6c:00.0", "0000:86:00.0")


@pytest.mark.parametrize("tree, expected", [
    # 4 RTX 6000 Ada (VGA, 0x030000) and the two functions of each ConnectX-7 in Ethernet mode (0x020000).
    ("asus_esc8000a_e12", [("0000:01:00.0", "GPU", "0300", "26b1"), ("0000:21:00.0", "NIC", "0200", "1021"),
                           ("0000:21:00.1", "NIC", "0200", "1021"), ("0000:41:00.0", "GPU", "0300", "26b1"),
                           ("0000:81:00.0", "NIC", "0200", "1021"), ("0000:81:00.1", "NIC", "0200", "1021"),
                           ("0000:c1:00.0", "GPU", "0300", "26b1"), ("0000:e1:00.0", "GPU", "0300", "26b1")]),
    # 8 H200 (3D, 0x030200) and 4 ConnectX-7 InfiniBand HCAs (0x020700), through the links into sys/devices.
    ("h200_kvm_guest", [(address, "NIC", "0207", "1021") if address in KVM_GUEST_HCAS
                        else (address, "GPU", "0302", "2335")
                        for address in ("0000:23:00.0", "0000:26:00.0", "0000:27:00.0", "0000:43:00.0",
                                        "0000:46:00.0", "0000:47:00.0", "0000:69:00.0", "0000:6c:00.0",
                                        "0000:6d:00.0", "0000:83:00.0", "0000:86:00.0", "0000:87:00.0")]),
    # Only the RDMA class tree: no sys/bus/pci/devices, no entry.
    ("ib_ndr_active", []),
])
def test_pcie_links_of_the_recorded_trees(tree, expected):
    """Trees recorded without link files: every GPU and NIC is listed, its link not read."""
    pcie = node_facts.gather(os.path.join(SYSFS_FIXTURES, tree), os.path.join(SYSFS_FIXTURES, "none"))["pcie"]
    assert [(d["address"], d["kind"], d["class_id"], d["device_id"]) for d in pcie] == expected
    assert all(d["link_cap"] is None and d["link_status"] is None for d in pcie)


def test_pcie_links_read_the_link_files(tmp_path):
    root = e12_with_links(tmp_path, {"0000:21:00.0": NOKYAN_512_SLOT})
    pcie = dict((d["address"], d) for d in node_facts.gather(root, os.path.join(root, "none"))["pcie"])
    assert (pcie["0000:01:00.0"]["link_status"], pcie["0000:01:00.0"]["link_cap"]) == (link(2.5, 16), link(16.0, 16))
    assert (pcie["0000:81:00.1"]["link_status"], pcie["0000:81:00.1"]["link_cap"]) == (link(32.0, 16), link(32.0, 16))
    assert (pcie["0000:21:00.0"]["link_status"], pcie["0000:21:00.0"]["link_cap"]) == (link(16.0, 8), link(32.0, 16))


def test_pcie_links_leave_out_other_devices_and_virtual_functions(hgx_h100):
    """The HGX H100 board: 8 GPUs and the ConnectX-7 are listed; the NVSwitches (NVIDIA bridges), the ASPEED VGA and
    a virtual function of the ConnectX-7 (15b3:101e, the kernel's ConnectX VF id, with ``physfn`` pointing at its
    physical function) are not."""
    pci(hgx_h100, "0000:1a:00.2", "0x15b3", "0x101e", "0x020700", driver="mlx5_core")
    vf_dir = os.path.join(hgx_h100, "sys/bus/pci/devices/0000:1a:00.2")
    os.symlink("../0000:1a:00.0", os.path.join(vf_dir, "physfn"))
    pcie = node_facts.gather(hgx_h100, os.path.join(hgx_h100, "etc/os-release"))["pcie"]
    assert [(d["address"], d["kind"], d["driver"]) for d in pcie] == [
        ("0000:18:00.0", "GPU", "nvidia"), ("0000:1a:00.0", "NIC", "mlx5_core")] + [
        (address, "GPU", "nvidia") for address in ("0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0",
                                                   "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")]
