"""plugin_utils/dcgm.py and its filters: the DCGM 4 build follows the driver branch, arch names follow the machine."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.dcgm import FilterModule
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import dcgm

FILTERS = FilterModule().filters()


# CUDA toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions": CUDA 13.0 GA needs >= 580.65.06,
# CUDA 12.x runs on 525 and newer, CUDA 11.x on 450 and newer. DCGM's install guide takes the package's
# CUDA major from the CUDA version the driver reports.
@pytest.mark.parametrize("branch, major", [
    ("580", 13), (580, 13), ("R580", 13), ("580.95.05", 13), ("590", 13),
    ("575", 12), ("570", 12), ("570.172.08", 12), ("570-server", 12), ("550", 12), ("535", 12), ("525", 12),
    ("520", 11), ("470", 11), ("450", 11),
])
def test_cuda_major_follows_the_driver_branch(branch, major):
    assert dcgm.cuda_major_for_branch(branch) == major


@pytest.mark.parametrize("branch", ["", None, "latest", "58", "abc.1", "440"])
def test_unusable_branches_are_refused(branch):
    with pytest.raises(ValueError):
        dcgm.cuda_major_for_branch(branch)


@pytest.mark.parametrize("override, expected", [(12, 12), ("13", 13), (" 12 ", 12), (11, 11)])
def test_an_explicit_cuda_major_wins_over_the_branch(override, expected):
    assert dcgm.dcgm_cuda_major(override, "580") == expected


@pytest.mark.parametrize("override", ["", None, "auto"])
def test_an_empty_override_means_derived(override):
    assert dcgm.dcgm_cuda_major(override, "570") == 12
    assert dcgm.dcgm_cuda_major(override, "580") == 13


@pytest.mark.parametrize("override", [10, "14", "twelve"])
def test_cuda_majors_without_a_dcgm4_build_are_refused(override):
    with pytest.raises(ValueError, match="CUDA|cuda_major"):
        dcgm.dcgm_cuda_major(override, "580")


def test_filters_turn_value_errors_into_filter_errors():
    assert FILTERS["dcgm_cuda_major"]("580") == 13
    assert FILTERS["dcgm_cuda_major"]("550", "") == 12
    assert FILTERS["dcgm_cuda_major"]("570", 13) == 13
    with pytest.raises(AnsibleFilterError, match="not an NVIDIA driver branch"):
        FILTERS["dcgm_cuda_major"]("latest")


@pytest.mark.parametrize("machine, go_arch", [
    ("x86_64", "amd64"), ("aarch64", "arm64"), ("amd64", "amd64"), ("arm64", "arm64"),
])
def test_architecture_names(machine, go_arch):
    assert FILTERS["dcgm_go_arch"](machine) == go_arch


@pytest.mark.parametrize("machine", ["ppc64le", "s390x", "", None])
def test_unknown_machines_are_refused(machine):
    with pytest.raises(AnsibleFilterError, match="machine"):
        FILTERS["dcgm_go_arch"](machine)


def test_node_exporter_tarball_per_architecture():
    # Asset names as Prometheus publishes them on the v1.9.1 release page.
    base = "https://github.com/prometheus/node_exporter/releases/download/v1.9.1/"
    assert FILTERS["dcgm_node_exporter_tarball_url"]("1.9.1", "x86_64") == base + "node_exporter-1.9.1.linux-amd64.tar.gz"
    assert FILTERS["dcgm_node_exporter_tarball_url"]("v1.9.1", "aarch64") == base + "node_exporter-1.9.1.linux-arm64.tar.gz"
    with pytest.raises(AnsibleFilterError, match="1.9.1"):
        FILTERS["dcgm_node_exporter_tarball_url"]("latest", "x86_64")


def test_tarball_checksum_string_or_per_architecture_dict():
    amd = "a" * 64
    arm = "b" * 64
    assert FILTERS["dcgm_tarball_checksum"]("sha256:" + amd, "aarch64") == amd
    assert FILTERS["dcgm_tarball_checksum"]({"amd64": amd, "arm64": "sha256:" + arm}, "aarch64") == arm
    assert FILTERS["dcgm_tarball_checksum"]({"amd64": amd, "arm64": ""}, "aarch64") == ""
    assert FILTERS["dcgm_tarball_checksum"]({"amd64": amd}, "x86_64") == amd
    assert FILTERS["dcgm_tarball_checksum"]("", "x86_64") == ""
