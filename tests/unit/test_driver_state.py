"""The nvidia_driver role's decisions (module_utils/driver_state.py): what to install and hold, kernel headers,
the module per installed kernel, pending reboots; parsers on real outputs from tests/fixtures/driver-state."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import driver_state as ds
from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver as nd

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "driver-state")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        text = handle.read()
    # Every fixture starts with '# ' source lines and a '---' line.
    return text.split("\n---\n", 1)[1]


# ---- parsers on real outputs --------------------------------------------------------------------------------

def test_dpkg_status_of_a_node_with_debians_driver():
    packages = ds.parse_dpkg_status(fixture("dpkg-status-trixie-nvidia-driver-550.txt"))
    assert packages["nvidia-driver"]["version"].startswith("550.")
    assert packages["nvidia-driver"]["hold"] is True
    assert packages["nvidia-kernel-dkms"]["hold"] is False
    assert "linux-headers-amd64" in packages
    # deinstalled / config-files stanzas are not installed packages
    assert all(info["version"] for info in packages.values())


def test_apt_policy_of_several_packages():
    policy = ds.parse_apt_policy(fixture("apt-cache-policy-trixie.txt"))
    assert policy["nvidia-driver"]["candidate"].startswith("550.")
    assert policy["linux-headers-amd64"] == {"installed": "", "candidate": "6.12.118-1"}
    # The running kernel of the test container is the VM host's: apt prints nothing for its headers package, so
    # the plan sees no candidate and names it.
    assert set(policy) == {"nvidia-driver", "linux-headers-amd64"}
    state = ds.decide(DEBIAN_PLAN, {}, policy, "", {"running": "6.18.44-fc-v657", "installed": []}, OPTIONS)
    assert state["problems"] == [
        "no linux-headers-6.18.44-fc-v657 in the configured package sources: DKMS cannot build the NVIDIA module for "
        "the running kernel 6.18.44-fc-v657 (a kernel newer or older than the archive offers was booted?). Boot a "
        "kernel the archive carries headers for, or add the source that has them; nothing was changed."]


def test_dkms_status_3x_names_the_kernel_it_built_for():
    entries = ds.parse_dkms_status(fixture("dkms-status-trixie-550.txt"))
    built = [e for e in entries if e["state"] == "installed"]
    assert built == [{"module": "nvidia-current", "version": "550.163.01", "kernel": "6.12.118+deb13-amd64",
                      "arch": "x86_64", "state": "installed"}]


@pytest.mark.parametrize("line,expected", [
    # dkms 2.8 (Ubuntu 22.04) prints the module and version comma-separated
    ("nvidia, 535.183.01, 5.15.0-117-generic, x86_64: installed",
     {"module": "nvidia", "version": "535.183.01", "kernel": "5.15.0-117-generic", "arch": "x86_64",
      "state": "installed"}),
    ("nvidia/580.95.05, 6.8.0-45-generic, x86_64: installed (WARNING! Diff between built and installed module!)",
     {"module": "nvidia", "version": "580.95.05", "kernel": "6.8.0-45-generic", "arch": "x86_64",
      "state": "installed"}),
    ("nvidia-current/550.163.01: added",
     {"module": "nvidia-current", "version": "550.163.01", "kernel": "", "arch": "", "state": "added"}),
])
def test_dkms_status_layouts(line, expected):
    assert ds.parse_dkms_status(line) == [expected]


@pytest.mark.parametrize("release,flavour", [
    ("6.1.0-26-amd64", "amd64"), ("6.1.0-26-cloud-amd64", "cloud-amd64"), ("6.12.48+deb13-amd64", "amd64"),
    ("6.12.48+deb13-rt-arm64", "rt-arm64"), ("6.8.0-45-generic", "generic"), ("6.8.0-1015-nvidia", "nvidia"),
    ("6.8.0-1017-aws", "aws"),
])
def test_kernel_flavour(release, flavour):
    assert ds.kernel_flavour(release) == flavour


def test_headers_follow_the_kernel_series():
    assert ds.headers_packages("Debian", "debian", "6.12.48+deb13-amd64") == [
        "linux-headers-6.12.48+deb13-amd64", "linux-headers-amd64"]
    assert ds.headers_packages("Debian", "ubuntu", "6.8.0-45-generic") == [
        "linux-headers-6.8.0-45-generic", "linux-headers-generic"]
    # An Ubuntu 22.04 node on the HWE kernel keeps the HWE series.
    assert ds.headers_packages("Debian", "ubuntu", "6.8.0-45-generic", ["linux-image-generic-hwe-22.04"]) == [
        "linux-headers-6.8.0-45-generic", "linux-headers-generic-hwe-22.04"]
    assert ds.headers_packages("RedHat", "rocky", "5.14.0-427.13.1.el9_4.x86_64") == [
        "kernel-devel-matched", "kernel-headers", "dkms"]


def test_prebuilt_modules_are_filled_for_the_running_kernel():
    plan = nd.driver_plan("Debian", "ubuntu", "ubuntu", "580", "open", ubuntu_modules="prebuilt")
    assert ds.prebuilt_module_packages(plan["prebuilt_modules"], "6.8.0-45-generic") == [
        "linux-modules-nvidia-580-server-open-generic", "linux-modules-nvidia-580-server-open-6.8.0-45-generic"]


# ---- decisions ----------------------------------------------------------------------------------------------

DEBIAN_PLAN = nd.driver_plan("Debian", "debian", "debian", "550", "proprietary")
OPTIONS = {"extra": [], "upgrade": False, "headers": True, "gpu_count": 8, "container": False, "branch": "550",
           "source": "debian", "check_mode": False, "sources_changed": False, "os_family": "Debian",
           "os_id": "debian"}
K = "6.12.48+deb13-amd64"
K_NEW = "6.12.57+deb13-amd64"


def installed(*names, version="550.163.01-2", held=()):
    return {n: {"version": version, "hold": n in held} for n in names}


def all_driver_packages(held=()):
    packages = installed(*DEBIAN_PLAN["packages"], held=held)
    packages.update(installed("linux-headers-amd64", "linux-headers-" + K, version="6.12.48-1"))
    packages.update(installed("nvidia-container-toolkit", version="1.17.8-1"))
    return packages


def kernel(modules=None, installed_kernels=(K,), headers=None):
    return {"running": K, "installed": list(installed_kernels),
            "modules": modules if modules is not None else {k: "550.163.01" for k in installed_kernels},
            "headers": headers if headers is not None else {k: True for k in installed_kernels}, "dkms": []}


LOADED_550 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.163.01  Tue Apr  8 12:06:50 UTC 2025\n"
POLICY = {"nvidia-driver": {"installed": "550.163.01-2", "candidate": "550.163.01-2"}}


def test_a_converged_node_plans_nothing():
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(held=DEBIAN_PLAN["packages"]), POLICY, LOADED_550,
                      kernel(), OPTIONS)
    assert state["install"] == [] and not state["driver_changing"] and state["problems"] == []
    assert state["hold_todo"] == [] and "nvidia-container-toolkit" not in state["hold"]
    assert not state["reboot_pending"] and state["kernel"]["status"] == "ok"


def test_a_fresh_node_installs_driver_and_headers_in_one_go():
    packages = installed("nvidia-container-toolkit", version="1.17.8-1")
    policy = dict(POLICY, **{"linux-headers-" + K: {"installed": "", "candidate": "6.12.48-1"}})
    state = ds.decide(DEBIAN_PLAN, packages, policy, "", kernel(modules={}), OPTIONS)
    assert state["install"] == DEBIAN_PLAN["packages"] + ["linux-headers-" + K, "linux-headers-amd64"]
    assert state["driver_changing"] and state["problems"] == []
    assert state["kernel"]["status"] == "skipped" and "not installed" in state["kernel"]["reason"]


def test_headers_missing_from_the_archive_stop_the_run_with_the_kernel_named():
    packages = installed("nvidia-container-toolkit", version="1.17.8-1")
    policy = dict(POLICY, **{"linux-headers-" + K: {"installed": "", "candidate": ""}})
    state = ds.decide(DEBIAN_PLAN, packages, policy, "", kernel(modules={}), OPTIONS)
    assert len(state["problems"]) == 1
    assert "linux-headers-" + K in state["problems"][0] and "nothing was changed" in state["problems"][0]


def test_a_container_needs_no_headers_and_says_why():
    packages = installed("nvidia-container-toolkit", version="1.17.8-1")
    state = ds.decide(DEBIAN_PLAN, packages, POLICY, "", kernel(modules={}, installed_kernels=()),
                      dict(OPTIONS, container=True, gpu_count=0))
    assert state["headers"] == [] and state["problems"] == []
    assert state["kernel"]["status"] == "skipped" and state["kernel"]["reason"].startswith("container:")


def test_a_kernel_update_without_the_module_is_rebuilt_before_any_reboot():
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(), POLICY, LOADED_550,
                      kernel(modules={K: "550.163.01", K_NEW: ""}, installed_kernels=(K, K_NEW)), OPTIONS)
    assert state["kernel"]["rebuild"] == [K_NEW] and state["kernel"]["status"] == "ok"


def test_an_installed_kernel_without_headers_is_named():
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(), POLICY, LOADED_550,
                      kernel(modules={K: "550.163.01", K_NEW: ""}, installed_kernels=(K, K_NEW),
                             headers={K: True, K_NEW: False}), OPTIONS)
    assert state["kernel"]["without_headers"] == [K_NEW] and state["kernel"]["rebuild"] == []


def test_the_running_kernel_without_the_module_is_missing():
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(), POLICY, LOADED_550, kernel(modules={K: "535.261.03"}),
                      OPTIONS)
    assert state["kernel"]["status"] == "missing"
    assert K in state["kernel"]["reason"] and "535.261.03" in state["kernel"]["reason"]


def test_a_reboot_left_pending_by_an_earlier_run_is_found_on_a_no_op_run():
    loaded_535 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jun 11 2025\n"
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(held=DEBIAN_PLAN["packages"]), POLICY, loaded_535,
                      kernel(), OPTIONS)
    assert state["install"] == [] and state["reboot_pending"]
    assert "535.261.03 is loaded" in state["reboot_reason"] and "550.163.01" in state["reboot_reason"]
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(), POLICY, "", kernel(), OPTIONS)
    assert state["reboot_pending"] and "no NVIDIA kernel module is loaded" in state["reboot_reason"]
    # Without a GPU nothing can load, so nothing is pending.
    state = ds.decide(DEBIAN_PLAN, all_driver_packages(), POLICY, "", kernel(), dict(OPTIONS, gpu_count=0))
    assert not state["reboot_pending"]


def test_holds_follow_what_is_installed_whatever_the_repository_names_it():
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", "590", "open")
    packages = installed("nvidia-open", "nvidia-dkms-open", "libnvidia-compute", "nvidia-driver-pinning-590",
                         "nvidia-firmware", "nvidia-modprobe", version="590.48.01-1")
    packages.update(installed("libnvidia-container1", "nvidia-container-toolkit-base", version="1.17.8-1"))
    state = ds.decide(plan, packages, {"nvidia-open": {"installed": "590.48.01-1", "candidate": "590.48.01-1"}},
                      "", kernel(modules={K: "590.48.01"}), dict(OPTIONS, branch="590", source="cuda"))
    assert state["hold"] == ["libnvidia-compute", "nvidia-dkms-open", "nvidia-driver-pinning-590",
                             "nvidia-firmware", "nvidia-modprobe", "nvidia-open"]


def test_the_fabric_manager_follows_the_driver_version_this_run_leaves():
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", "580", "open", fabricmanager=True, fabric="nvlink5")
    policy = {"nvidia-open-580": {"installed": "", "candidate": "580.95.05-1"}}
    state = ds.decide(plan, {}, policy, "", kernel(modules={}), dict(OPTIONS, branch="580", source="cuda",
                                                                     os_id="ubuntu", headers=False))
    assert state["install"] == ["nvidia-open-580", "nvidia-fabricmanager=580.95.05-*", "libnvidia-nscq=580.95.05-*",
                                "nvlsm"]


def test_a_missing_fabric_manager_is_added_at_the_installed_version_not_the_newer_candidate():
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", "580", "open", fabricmanager=True, fabric="nvswitch")
    packages = installed("nvidia-open-580", "libnvidia-nscq", version="580.82.07-1")
    policy = {"nvidia-open-580": {"installed": "580.82.07-1", "candidate": "580.95.05-1"}}
    state = ds.decide(plan, packages, policy, "", kernel(modules={K: "580.82.07"}),
                      dict(OPTIONS, branch="580", source="cuda", headers=False))
    assert state["install"] == ["nvidia-fabricmanager=580.82.07-*"]


def test_no_candidate_and_nothing_installed_is_a_problem_except_in_check_mode_after_a_source_change():
    state = ds.decide(DEBIAN_PLAN, {}, {}, "", kernel(modules={}), dict(OPTIONS, headers=False))
    assert any("no installable nvidia-driver" in p for p in state["problems"])
    state = ds.decide(DEBIAN_PLAN, {}, {}, "", kernel(modules={}),
                      dict(OPTIONS, headers=False, check_mode=True, sources_changed=True))
    assert state["problems"] == []


def test_an_offer_below_the_floor_is_refused_and_another_branch_is_noted():
    policy = {"nvidia-driver": {"installed": "", "candidate": "470.256.02-1"}}
    state = ds.decide(DEBIAN_PLAN, {}, policy, "", kernel(modules={}), dict(OPTIONS, headers=False))
    assert any("older than the supported minimum branch 535" in p for p in state["problems"])
    policy = {"nvidia-driver": {"installed": "", "candidate": "535.261.03-1~deb12u1"}}
    state = ds.decide(DEBIAN_PLAN, {}, policy, "", kernel(modules={}), dict(OPTIONS, headers=False))
    assert state["problems"] == [] and "carry branch 535" in state["notes"][0]


def test_the_state_carries_the_one_branch_decision():
    policy = {"nvidia-driver": {"installed": "535.261.03-1~deb12u1", "candidate": "535.261.03-1~deb12u1"}}
    packages = installed(*DEBIAN_PLAN["packages"], version="535.261.03-1~deb12u1")
    state = ds.decide(DEBIAN_PLAN, packages, policy, "", kernel(modules={}), dict(OPTIONS, headers=False))
    assert state["branch"] == nd.branch_decision("550", "535.261.03-1~deb12u1", "535.261.03-1~deb12u1", "debian")
    assert (state["branch"]["installed"], state["branch"]["matches"], state["branch"]["change"]) == ("535", False, True)
    assert state["notes"] == [state["branch"]["note"]]


def test_persistenced_is_found_where_the_packages_put_it_and_a_masked_unit_is_passed_over(tmp_path):
    def touch(path, text=""):
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    assert ds.persistenced(str(tmp_path)) == {"unit_file": "", "unit_text": "", "binary": "", "masked": []}
    # Debian's package: the unit under /usr/lib (and /lib, the same file on a merged /usr), the binary in /usr/bin.
    unit = "[Service]\nExecStart=/usr/bin/nvidia-persistenced --user nvpd --no-persistence-mode\n"
    touch("/usr/lib/systemd/system/nvidia-persistenced.service", unit)
    touch("/usr/bin/nvidia-persistenced")
    found = ds.persistenced(str(tmp_path))
    assert found == {"unit_file": "/usr/lib/systemd/system/nvidia-persistenced.service", "unit_text": unit,
                     "binary": "/usr/bin/nvidia-persistenced", "masked": []}
    # An operator's unit in /etc wins; masked (a link to /dev/null), it is not the unit to read.
    etc = tmp_path / "etc/systemd/system"
    etc.mkdir(parents=True)
    (etc / "nvidia-persistenced.service").symlink_to("/dev/null")
    found = ds.persistenced(str(tmp_path))
    assert found["masked"] == ["/etc/systemd/system/nvidia-persistenced.service"]
    assert found["unit_file"] == "/usr/lib/systemd/system/nvidia-persistenced.service"
    (etc / "nvidia-persistenced.service").unlink()
    touch("/etc/systemd/system/nvidia-persistenced.service", "[Service]\nExecStart=/usr/sbin/nvidia-persistenced\n")
    assert ds.persistenced(str(tmp_path))["unit_file"] == "/etc/systemd/system/nvidia-persistenced.service"


def test_the_state_read_says_whether_an_earlier_gpu_policy_left_its_unit(monkeypatch, tmp_path):
    """main.yml includes gpu_policy_absent.yml only when this says the unit is there: no stat of its own."""
    from module_harness import patch_module, run_main
    from ansible_collections.gpufleet.cluster.plugins.modules import nvidia_driver_state

    patch_module(monkeypatch, lambda module, args, **kwargs: (0, "", ""))
    unit = "/etc/systemd/system/gpufleet-gpu-policy.service"
    args = {"plan": DEBIAN_PLAN, "source": "debian", "branch": "550", "os_family": "Debian", "os_id": "debian",
            "container": True, "root": str(tmp_path), "refresh": False, "_ansible_check_mode": True}

    def exists(**extra):
        return run_main(nvidia_driver_state.main, dict(args, **extra))["state"]["gpu_policy_unit_exists"]

    assert exists(gpu_policy_unit=unit) is False
    (tmp_path / unit.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / unit.lstrip("/")).write_text("[Unit]\n")
    assert exists(gpu_policy_unit=unit) is True
    assert exists() is False  # no path given: nothing is read


def test_only_the_driver_stack_is_held_never_the_container_toolkit():
    installed = dict((name, {"version": "1", "hold": False}) for name in [
        "nvidia-driver", "libcuda1", "openssh-server", "nvidia-kernel-dkms", "docker.io", "firmware-nvidia-gsp",
        "nvidia-container-toolkit", "libnvidia-container1", "extra-tool"])
    assert ds.managed_installed(installed, ["extra-tool", "not-installed"]) == [
        "extra-tool", "firmware-nvidia-gsp", "libcuda1", "nvidia-driver", "nvidia-kernel-dkms"]
