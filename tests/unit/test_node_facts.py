"""node_facts / sysfs readers on sysfs trees laid out like the kernel's.

Device ids and classes are those the PCI ID database (pci.ids) lists for the parts named, and the file
layout is the kernel's (Documentation/ABI/testing/sysfs-bus-pci): one directory per BDF holding
`vendor`, `device`, `class`, `numa_node`, and a `driver` symlink.
"""
import os

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
