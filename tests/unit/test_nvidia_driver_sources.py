"""apt source editing (components added in place, never duplicated) and the loaded-module version parser."""
import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver as nd

NONFREE = ["contrib", "non-free", "non-free-firmware"]

# /etc/apt/sources.list of the gpufleet-node:trixie test image (docker run --rm gpufleet-node:trixie cat /etc/apt/sources.list),
# with the mirror's host name replaced by a placeholder (the image writes the mirror it was built from)
TRIXIE_LIST = (
    "deb http://mirror.example/debian trixie main\n"
    "deb http://mirror.example/debian trixie-updates main\n"
    "deb http://mirror.example/debian-security trixie-security main\n"
)

# /etc/apt/sources.list.d/debian.sources as the Debian 13 installer writes it (deb822 format), placeholder hosts
TRIXIE_DEB822 = (
    "Types: deb deb-src\n"
    "URIs: http://mirror.example/debian\n"
    "Suites: trixie trixie-updates\n"
    "Components: main non-free-firmware\n"
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    "\n"
    "Types: deb deb-src\n"
    "URIs: http://security.example/debian-security\n"
    "Suites: trixie-security\n"
    "Components: main non-free-firmware\n"
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
)


def test_one_line_entries_get_the_components_in_place():
    result = nd.add_apt_components(TRIXIE_LIST, "trixie", NONFREE)
    assert result["found"] == 3
    assert result["changed"]
    lines = result["content"].splitlines()
    assert len(lines) == 3
    assert lines[0] == "deb http://mirror.example/debian trixie main contrib non-free non-free-firmware"
    assert lines[2] == "deb http://mirror.example/debian-security trixie-security main contrib non-free non-free-firmware"
    assert result["content"].endswith("\n")


def test_second_pass_changes_nothing():
    once = nd.add_apt_components(TRIXIE_LIST, "trixie", NONFREE)["content"]
    twice = nd.add_apt_components(once, "trixie", NONFREE)
    assert not twice["changed"]
    assert twice["found"] == 3
    assert twice["content"] == once


def test_no_component_is_duplicated_when_some_are_there():
    text = "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror/debian trixie main non-free\n"
    result = nd.add_apt_components(text, "trixie", NONFREE)
    line = result["content"].splitlines()[0]
    assert line.split("]")[1].split() == ["http://mirror/debian", "trixie", "main", "non-free", "contrib", "non-free-firmware"]
    assert line.count("non-free ") + line.endswith("non-free") == 1


def test_other_releases_comments_and_foreign_repos_are_left_alone():
    text = (
        "# deb http://mirror.example/debian trixie main\n"
        "deb http://mirror.example/debian bookworm main\n"
        "deb https://docker.example/linux/debian trixie stable\n"
    )
    result = nd.add_apt_components(text, "trixie", NONFREE)
    assert result["content"].splitlines()[0] == "# deb http://mirror.example/debian trixie main"
    assert result["content"].splitlines()[1] == "deb http://mirror.example/debian bookworm main"
    # Docker's repository reuses the codename as its suite but is not a Debian entry (no main component).
    assert result["content"].splitlines()[2] == "deb https://docker.example/linux/debian trixie stable"
    assert result["found"] == 0
    assert not result["changed"]


def test_deb822_components_line_is_extended():
    result = nd.add_apt_components(TRIXIE_DEB822, "trixie", NONFREE)
    assert result["found"] == 2
    components = [l for l in result["content"].splitlines() if l.startswith("Components:")]
    assert components == ["Components: main non-free-firmware contrib non-free"] * 2
    assert nd.add_apt_components(result["content"], "trixie", NONFREE)["changed"] is False


def test_disabled_deb822_stanza_does_not_count():
    text = "Enabled: no\nTypes: deb\nURIs: http://mirror.example/debian\nSuites: trixie\nComponents: main\n"
    result = nd.add_apt_components(text, "trixie", NONFREE)
    assert result["found"] == 0
    assert not result["changed"]


def test_empty_file_has_no_entry():
    assert nd.add_apt_components("", "trixie", NONFREE) == {"content": "", "found": 0, "changed": False}


def test_ubuntu_noble_deb822_gets_restricted_and_multiverse():
    text = (
        "Types: deb\n"
        "URIs: http://mirror.example/ubuntu/\n"
        "Suites: noble noble-updates noble-backports\n"
        "Components: main universe\n"
        "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
    )
    result = nd.add_apt_components(text, "noble", ["restricted", "multiverse"])
    assert "Components: main universe restricted multiverse" in result["content"]


# ---- /proc/driver/nvidia/version ----------------------------------------------------------------------------
# Lines below are real captured file contents, each with where it was published.

# Open kernel module, 570 branch on Ubuntu 22.04 (an agent log in a public repository, `cat /proc/driver/nvidia/version`).
PROC_OPEN_570 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  "
    "(dvs-builder@U22-I3-H04-03-1)  Sat Sep 20 00:47:16 UTC 2025\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
# Open kernel module on Fedora (a public install guide showing `cat /proc/driver/nvidia/version`).
PROC_OPEN_555 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58.02  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Jun 25 01:26:03 UTC 2024\n"
    "GCC version:  gcc version 14.2.1 20240801 (Red Hat 14.2.1-1) (GCC) \n"
)
# Proprietary kernel module (a public troubleshooting note showing `cat /proc/driver/nvidia/version`).
PROC_PROPRIETARY_515 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  515.76  Mon Sep 12 19:21:56 UTC 2022\n"
    "GCC version:  gcc version 7.5.0 (Ubuntu 7.5.0-3ubuntu1~18.04)\n"
)


def test_loaded_version_captured_h200():
    from test_nvidia_smi import load
    assert nd.loaded_version(load("proc-driver-version-h200-vm-r580.txt")) == "580.159.04"
    assert nd.driver_branch(nd.loaded_version(load("proc-driver-version-h200-vm-r580.txt"))) == 580


@pytest.mark.parametrize("text,version", [
    (PROC_OPEN_570, "570.195.03"),
    (PROC_OPEN_555, "555.58.02"),
    (PROC_PROPRIETARY_515, "515.76"),
])
def test_loaded_version(text, version):
    assert nd.loaded_version(text) == version


@pytest.mark.parametrize("text", ["", None, "GCC version:  gcc version 12.3.0\n", "NVRM version: garbage\n"])
def test_loaded_version_unknown(text):
    assert nd.loaded_version(text) is None


def test_loaded_version_compares_with_package_version():
    assert nd.loaded_version(PROC_OPEN_570) == nd.upstream_version("570.195.03-0ubuntu0.22.04.1")


def test_deb822_third_party_stanza_for_the_codename_is_left_alone():
    text = (
        "Types: deb\n"
        "URIs: https://docker.example/linux/debian\n"
        "Suites: trixie\n"
        "Components: stable\n"
    )
    result = nd.add_apt_components(text, "trixie", NONFREE)
    assert result == {"content": text, "found": 0, "changed": False}


# --- the apt_source_components module: every source file of a node in one call ---------------------------------

def run_components(monkeypatch, root, **extra):
    from ansible_collections.gpufleet.cluster.plugins.modules import apt_source_components
    from module_harness import patch_exits, run_main

    patch_exits(monkeypatch)
    return run_main(apt_source_components.main, dict({"codename": "trixie", "components": NONFREE,
                                                      "root": str(root)}, **extra))


def apt_tree(tmp_path):
    (tmp_path / "etc/apt/sources.list.d").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list").write_text(TRIXIE_LIST)
    (tmp_path / "etc/apt/sources.list.d/debian.sources").write_text(TRIXIE_DEB822)
    # Docker's repository reuses the codename as its suite: not the distribution's, left alone.
    (tmp_path / "etc/apt/sources.list.d/docker.list").write_text(
        "deb [signed-by=/etc/apt/keyrings/docker.asc] https://download.example/linux/debian trixie stable\n")
    (tmp_path / "etc/apt/sources.list.d/old.list.save").write_text(TRIXIE_LIST)  # not a name apt reads
    (tmp_path / "etc/apt/sources.list.d/linked.list").symlink_to(tmp_path / "etc/apt/sources.list")
    return tmp_path


def test_the_module_edits_every_source_file_of_the_release_in_one_call(monkeypatch, tmp_path):
    root = apt_tree(tmp_path)
    result = run_components(monkeypatch, root, _ansible_check_mode=True, _ansible_diff=True)
    assert result["changed"] is True and result["found"] == 5
    assert result["files"] == ["/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources",
                               "/etc/apt/sources.list.d/docker.list"]
    assert result["edited"] == ["/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources"]
    assert [d["before_header"] for d in result["diff"]] == result["edited"]
    assert (root / "etc/apt/sources.list").read_text() == TRIXIE_LIST  # check mode wrote nothing

    result = run_components(monkeypatch, root)
    assert result["changed"] is True
    assert "trixie main contrib non-free non-free-firmware" in (root / "etc/apt/sources.list").read_text()
    assert "Components: main non-free-firmware contrib non-free\n" in \
        (root / "etc/apt/sources.list.d/debian.sources").read_text()
    assert "trixie stable\n" in (root / "etc/apt/sources.list.d/docker.list").read_text()
    assert oct((root / "etc/apt/sources.list").stat().st_mode & 0o777) == "0o644"
    again = run_components(monkeypatch, root)
    assert again["changed"] is False and again["edited"] == [] and again["found"] == 5


def test_a_node_without_an_entry_of_its_release_reports_none(monkeypatch, tmp_path):
    (tmp_path / "etc/apt").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list").write_text("deb http://mirror.example/debian bookworm main\n")
    result = run_components(monkeypatch, tmp_path)
    assert (result["found"], result["changed"]) == (0, False)
