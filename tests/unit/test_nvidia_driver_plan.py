"""Package selection of the nvidia_driver role for every source, including the ones the test
containers cannot install (NVIDIA's CUDA repository, Ubuntu, RHEL), read through the role's vars files."""
import os

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver as nd

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "nvidia_driver")


def load_yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def os_source(family_file):
    return load_yaml("vars", family_file)["__nvidia_driver_os_source"]


# ---- branch floor -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("branch", ["535", "550", "580", "590", 580])
def test_supported_branches_pass(branch):
    assert nd.branch_decision(branch)["problem"] == ""


@pytest.mark.parametrize("branch", ["470", "525", 470, "534"])
def test_old_branches_are_refused_naming_the_floor(branch):
    problem = nd.branch_decision(branch)["problem"]
    assert problem
    assert "535" in problem
    assert str(branch) in problem


@pytest.mark.parametrize("branch", ["latest", "", None, "5.80", "580-server", "58"])
def test_non_numeric_branches_are_refused(branch):
    problem = nd.branch_decision(branch)["problem"]
    assert "not a driver branch number" in problem and "535" in problem


def test_the_filter_says_the_same_as_the_decision():
    from ansible_collections.gpufleet.cluster.plugins.filter.nvidia_driver import FilterModule
    check = FilterModule().filters()["nvidia_driver_branch_problem"]
    for branch in ("580", "470", "latest", None):
        assert check(branch) == nd.branch_decision(branch)["problem"]


# The installed driver against the requested branch: install_dnf.yml resets the module stream on a change,
# reboot.yml reports installed_branch and branch_matches, both from the module's state.branch.
@pytest.mark.parametrize("installed_version, installed, matches, change", [
    ("580.95.05-1", "580", True, False),
    ("3:570.172.08-1.el9", "570", False, True),
    ("", None, False, False),
    ("(none)", None, False, True),
])
def test_the_installed_branch_against_the_requested_one(installed_version, installed, matches, change):
    decision = nd.branch_decision("580", installed_version=installed_version)
    assert (decision["installed"], decision["matches"], decision["change"]) == (installed, matches, change)


def test_the_offer_below_the_floor_and_another_branch():
    low = nd.branch_decision("550", offered_version="470.256.02-1", source="debian")
    assert low["offered"] == "470"
    assert low["offered_problem"].startswith("the debian source offers driver 470.256.02-1, older than the supported "
                                             "minimum branch 535;")
    assert "carry branch 470 (470.256.02-1)" in low["note"]
    same = nd.branch_decision("550", offered_version="550.163.01-2", source="debian")
    assert (same["offered_problem"], same["note"]) == ("", "")
    assert nd.branch_decision("550")["note"] == nd.branch_decision("550")["offered_problem"] == ""


def test_a_check_of_the_installed_driver_takes_its_floor():
    assert nd.branch_decision(None, installed_version="570.133.20", floor=535)["installed_ok"]
    assert not nd.branch_decision(None, installed_version="440.33.01", floor=535)["installed_ok"]
    assert not nd.branch_decision(None, installed_version="570.133.20", floor=580)["installed_ok"]
    assert not nd.branch_decision(None, installed_version=None)["installed_ok"]


def test_default_branch_is_580_and_documented_the_same():
    """The branch is the shared setting gpufleet_driver_branch (gpu_monitoring's DCGM package follows it): 580."""
    defaults = load_yaml("defaults", "main.yml")
    spec = load_yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert defaults["nvidia_driver_branch"] == "{{ gpufleet_driver_branch }}"
    assert spec["nvidia_driver_branch"]["default"] == "{{ gpufleet_driver_branch }}"
    assert spec["nvidia_driver_branch"]["type"] == "str"
    with open(os.path.join(ROLE, "..", "gpufleet_defaults", "defaults", "main.yml")) as handle:
        assert yaml.safe_load(handle)["gpufleet_driver_branch"] == "580"
    with open(os.path.join(ROLE, "..", "gpufleet_defaults", "meta", "argument_specs.yml")) as handle:
        shared = yaml.safe_load(handle)["argument_specs"]["settings"]["options"]["gpufleet_driver_branch"]
    assert shared["default"] == "580" and shared["type"] == "str"


def test_every_default_is_documented_with_the_same_value():
    defaults = load_yaml("defaults", "main.yml")
    spec = load_yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(spec)
    for name, option in spec.items():
        assert option["default"] == defaults[name], name
        assert option.get("description"), name
        assert option.get("type"), name


# ---- kernel module flavour ----------------------------------------------------------------------------------

@pytest.mark.parametrize("choice,turing,expected", [
    ("auto", True, "open"),
    ("auto", False, "proprietary"),
    ("open", False, "open"),
    ("proprietary", True, "proprietary"),
])
def test_kernel_flavour(choice, turing, expected):
    assert nd.kernel_flavour(choice, turing) == expected


def test_kernel_flavour_rejects_unknown():
    with pytest.raises(ValueError):
        nd.kernel_flavour("nouveau", True)


# ---- the plan of a node: the settings' auto decided from gpufleet_node -------------------------------------------

def gpufleet_node(os_id="ubuntu", family="Debian", **facts):
    node = {"os": {"id": os_id, "family": family}, "gpus_turing_or_newer": True, "nvswitch": False,
            "nvlink_fabric": "", "imex": False, "secure_boot": "disabled"}
    node.update(facts)
    return node


def test_the_node_plan_is_the_plan_of_its_decisions():
    plan = nd.node_driver_plan(gpufleet_node(), "ubuntu", "580")
    assert plan == dict(nd.driver_plan("Debian", "ubuntu", "ubuntu", "580", "open"),
                        source="ubuntu", flavour="open", ubuntu_modules="dkms")


@pytest.mark.parametrize("facts, kernel_modules, flavour", [
    ({}, "auto", "open"), ({"gpus_turing_or_newer": False}, "auto", "proprietary"),
    ({"gpus_turing_or_newer": False}, "open", "open"), ({}, "proprietary", "proprietary"),
])
def test_kernel_modules_auto_follows_the_gpus(facts, kernel_modules, flavour):
    assert nd.node_driver_plan(gpufleet_node(**facts), "cuda", "580", kernel_modules)["flavour"] == flavour


@pytest.mark.parametrize("facts, setting, fabricmanager", [
    ({}, "auto", ""), ({"nvswitch": True}, "auto", "nvidia-fabricmanager"),
    ({"nvswitch": "yes"}, "auto", "nvidia-fabricmanager"), ({"nvswitch": "false"}, "auto", ""),
    ({"nvlink_fabric": "nvlink5"}, "auto", "nvidia-fabricmanager"), ({"nvswitch": True}, "never", ""),
    ({}, "always", "nvidia-fabricmanager"),
])
def test_fabricmanager_auto_follows_the_switches(facts, setting, fabricmanager):
    plan = nd.node_driver_plan(gpufleet_node(**facts), "cuda", "580", fabricmanager=setting)
    assert plan["fabricmanager"] == fabricmanager


def test_nvlink5_and_imex_come_from_the_node():
    plan = nd.node_driver_plan(gpufleet_node(nvlink_fabric="nvlink5", imex=True), "cuda", "580")
    names = [p["name"] for p in plan["fabric_packages"]]
    assert names == ["nvidia-fabricmanager", "libnvidia-nscq", "nvlsm", "nvidia-imex"]


@pytest.mark.parametrize("secure_boot, setting, modules", [
    ("enabled", "auto", "prebuilt"), ("disabled", "auto", "dkms"), ("unknown", "auto", "dkms"),
    ("enabled", "dkms", "dkms"), ("disabled", "prebuilt", "prebuilt"),
])
def test_ubuntu_modules_auto_follows_secure_boot(secure_boot, setting, modules):
    plan = nd.node_driver_plan(gpufleet_node(secure_boot=secure_boot), "ubuntu", "580", ubuntu_modules=setting)
    assert (plan["ubuntu_modules"], plan["signed_modules"]) == (modules, modules == "prebuilt")


@pytest.mark.parametrize("kwargs, message", [
    ({"kernel_modules": "nouveau"}, "nvidia_driver_kernel_modules"),
    ({"fabricmanager": "sometimes"}, "nvidia_driver_fabricmanager"),
    ({"ubuntu_modules": "built"}, "nvidia_driver_ubuntu_modules"),
])
def test_unknown_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nd.node_driver_plan(gpufleet_node(), "ubuntu", "580", **kwargs)


def test_the_filter_takes_the_node_and_keywords():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter.nvidia_driver import FilterModule
    plan_filter = FilterModule().filters()["nvidia_driver_plan"]
    assert plan_filter(gpufleet_node(), source="ubuntu", branch="580") == nd.node_driver_plan(
        gpufleet_node(), "ubuntu", "580")
    with pytest.raises(TypeError):
        plan_filter(gpufleet_node(), "ubuntu", "580")  # pylint: disable=too-many-function-args
    with pytest.raises(AnsibleFilterError, match="gpufleet_node"):
        plan_filter("Debian", source="ubuntu", branch="580")


# ---- default source per OS (vars files) ---------------------------------------------------------------------

@pytest.mark.parametrize("vars_file,source", [
    ("Debian.yml", "debian"), ("Ubuntu.yml", "ubuntu"), ("RedHat.yml", "cuda"),
])
def test_default_source_per_os(vars_file, source):
    assert os_source(vars_file) == source


# ---- Debian non-free ----------------------------------------------------------------------------------------

def test_debian_trixie_proprietary():
    plan = nd.driver_plan("Debian", "debian", os_source("Debian.yml"), "550", "proprietary")
    assert plan["packages"][:2] == ["nvidia-driver", "nvidia-kernel-dkms"]
    assert "nvidia-persistenced" in plan["packages"]
    assert plan["version_package"] == "nvidia-driver"
    assert set(plan["packages"]) <= set(plan["hold"])
    assert plan["package_manager"] == "apt"


def test_debian_open_modules_use_debians_open_dkms_package():
    plan = nd.driver_plan("Debian", "debian", "debian", "550", "open")
    assert "nvidia-open-kernel-dkms" in plan["packages"]
    assert "nvidia-kernel-dkms" not in plan["packages"]
    assert "firmware-nvidia-gsp" in plan["packages"]


def test_debian_with_nvswitch_asks_for_the_cuda_source():
    with pytest.raises(ValueError, match="nvidia_driver_source: cuda"):
        nd.driver_plan("Debian", "debian", "debian", "550", "open", fabricmanager=True)


def test_debian_source_on_ubuntu_is_refused():
    with pytest.raises(ValueError, match="needs Debian"):
        nd.driver_plan("Debian", "ubuntu", "debian", "580", "open")


# ---- Ubuntu -server packages --------------------------------------------------------------------------------

# Ubuntu's headless server metapackages (no X, no desktop), as NVIDIA's Ansible role and DeepOps install them:
# packages.ubuntu.com lists nvidia-headless-580-server, nvidia-headless-580-server-open and their -no-dkms twins.
@pytest.mark.parametrize("flavour,driver,dkms", [
    ("proprietary", "nvidia-headless-580-server", "nvidia-dkms-580-server"),
    ("open", "nvidia-headless-580-server-open", "nvidia-dkms-580-server-open"),
])
def test_ubuntu_server_packages(flavour, driver, dkms):
    plan = nd.driver_plan("Debian", "ubuntu", os_source("Ubuntu.yml"), "580", flavour)
    assert plan["packages"][0] == driver
    assert plan["version_package"] == driver
    assert dkms in plan["hold"]
    assert driver in plan["hold"]
    assert "nvidia-utils-580-server" in plan["packages"]
    assert plan["fabricmanager"] == ""
    assert plan["dkms"] and not plan["signed_modules"] and plan["prebuilt_modules"] == []
    assert not any(p.startswith("nvidia-driver-") for p in plan["packages"]), "the desktop metapackage"


@pytest.mark.parametrize("flavour,suffix", [("proprietary", "-server"), ("open", "-server-open")])
def test_ubuntu_prebuilt_signed_modules_need_no_dkms(flavour, suffix):
    plan = nd.driver_plan("Debian", "ubuntu", "ubuntu", "580", flavour, ubuntu_modules="prebuilt")
    assert plan["packages"][0] == "nvidia-headless-no-dkms-580" + suffix
    assert plan["prebuilt_modules"] == ["linux-modules-nvidia-580%s-{flavour}" % suffix,
                                        "linux-modules-nvidia-580%s-{kernel}" % suffix]
    assert plan["signed_modules"] and not plan["dkms"]
    assert not any("dkms-" in p and "no-dkms" not in p for p in plan["packages"])


def test_ubuntu_fabricmanager_keeps_the_branch_in_its_name():
    plan = nd.driver_plan("Debian", "ubuntu", "ubuntu", "580", "open", fabricmanager=True)
    assert plan["fabricmanager"] == "nvidia-fabricmanager-580"
    assert plan["fabricmanager"] in plan["hold"]
    assert nd.fabricmanager_spec(plan["fabricmanager"], plan["fabricmanager_pin"], "580.95.05-0ubuntu0.24.04.2") == \
        "nvidia-fabricmanager-580=580.95.05-*"


# ---- NVIDIA CUDA repository (apt) -------------------------------------------------------------------------------

@pytest.mark.parametrize("flavour,driver", [("proprietary", "cuda-drivers-580"), ("open", "nvidia-open-580")])
def test_cuda_apt_driver(flavour, driver):
    plan = nd.driver_plan("Debian", "debian", "cuda", "580", flavour)
    assert plan["packages"] == [driver]
    assert plan["version_package"] == driver
    assert plan["package_manager"] == "apt"


@pytest.mark.parametrize("branch,name,spec", [
    ("535", "nvidia-fabricmanager-535", "nvidia-fabricmanager-535=535.274.02-*"),
    ("570", "nvidia-fabricmanager-570", "nvidia-fabricmanager-570=570.195.03-*"),
    ("580", "nvidia-fabricmanager", "nvidia-fabricmanager=580.95.05-*"),
    ("590", "nvidia-fabricmanager", "nvidia-fabricmanager=590.44.01-*"),
])
def test_cuda_fabricmanager_name_changes_at_580_and_is_pinned(branch, name, spec):
    versions = {"535": "535.274.02-1", "570": "570.195.03-1", "580": "580.95.05-1", "590": "590.44.01-1"}
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", branch, "open", fabricmanager=True)
    assert plan["fabricmanager"] == name
    assert name in plan["hold"]
    assert nd.fabricmanager_spec(name, plan["fabricmanager_pin"], versions[branch]) == spec


def test_fabricmanager_needs_a_known_driver_version():
    with pytest.raises(ValueError, match="cannot match the fabric manager"):
        nd.fabricmanager_spec("nvidia-fabricmanager", "apt", "")


# ---- NVIDIA CUDA repository (RHEL dnf module) -------------------------------------------------------------

@pytest.mark.parametrize("flavour,fm,spec", [
    ("open", False, "@nvidia-driver:580-open"),
    ("proprietary", False, "@nvidia-driver:580-dkms"),
    ("open", True, "@nvidia-driver:580-open/fm"),
])
def test_rhel_module_stream(flavour, fm, spec):
    plan = nd.driver_plan("RedHat", "rocky", os_source("RedHat.yml"), "580", flavour, fabricmanager=fm)
    assert plan["packages"] == [spec]
    assert plan["package_manager"] == "dnf"
    assert plan["version_package"] == "nvidia-driver"
    assert "kmod-nvidia-*" in plan["hold"]


def test_rhel_fabricmanager_is_version_pinned_the_dnf_way():
    plan = nd.driver_plan("RedHat", "rhel", "cuda", "570", "open", fabricmanager=True)
    assert nd.fabricmanager_spec(plan["fabricmanager"], plan["fabricmanager_pin"], "3:570.195.03-1.el9") == \
        "nvidia-fabric-manager-570.195.03"
    # RHEL names the package nvidia-fabric-manager (NVIDIA Fabric Manager user guide, RHEL install section).
    assert plan["fabricmanager"] == "nvidia-fabric-manager"
    assert [p["name"] for p in plan["fabric_packages"]] == ["nvidia-fabric-manager", "libnvidia-nscq"]


# ---- NVIDIA's apt repository from branch 590: flat names and a pinning package ------------------------------
# NVIDIA Driver Installation Guide r590, "Recent updates": cuda-drivers-580 is removed, nvidia-dkms-580 becomes
# nvidia-dkms, nvidia-dkms-580-open becomes nvidia-dkms-open, libnvidia-nscq keeps its name; a branch is tracked by
# installing nvidia-driver-pinning-<branch> before the driver.

@pytest.mark.parametrize("flavour,driver,dkms", [("open", "nvidia-open", "nvidia-dkms-open"),
                                                 ("proprietary", "cuda-drivers", "nvidia-dkms")])
def test_cuda_apt_590_uses_flat_names_and_the_pinning_package(flavour, driver, dkms):
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", "590", flavour)
    assert plan["packages"] == [driver]
    assert plan["pin_packages"] == ["nvidia-driver-pinning-590"]
    assert dkms in plan["hold"] and "nvidia-driver-pinning-590" in plan["hold"]
    assert not any("590" in p for p in plan["hold"] if p != "nvidia-driver-pinning-590")


def test_cuda_apt_580_keeps_branch_names_and_needs_no_pinning():
    plan = nd.driver_plan("Debian", "debian", "cuda", "580", "open")
    assert plan["packages"] == ["nvidia-open-580"] and plan["pin_packages"] == []
    assert "nvidia-dkms-580-open" in plan["hold"]


# ---- fabric: NVSwitch (Hopper), NVLink 5 (Blackwell: NVLSM), GB200 racks (IMEX) -----------------------------

def test_hopper_nvswitch_gets_fabricmanager_and_nscq_pinned():
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", "580", "open", fabricmanager=True, fabric="nvswitch")
    assert plan["fabric_packages"] == [{"name": "nvidia-fabricmanager", "pinned": True},
                                       {"name": "libnvidia-nscq", "pinned": True}]


def test_blackwell_adds_nvlsm_and_gb200_adds_imex():
    b200 = nd.driver_plan("Debian", "ubuntu", "cuda", "580", "open", fabricmanager=True, fabric="nvlink5")
    gb200 = nd.driver_plan("Debian", "ubuntu", "cuda", "580", "open", fabricmanager=True, fabric="nvlink5",
                           imex=True)
    assert [p["name"] for p in b200["fabric_packages"]] == ["nvidia-fabricmanager", "libnvidia-nscq", "nvlsm"]
    assert {"name": "nvlsm", "pinned": False} in b200["fabric_packages"]
    assert [p["name"] for p in gb200["fabric_packages"]][-1] == "nvidia-imex"
    assert "nvidia-imex" in gb200["hold"] and "nvlsm" not in gb200["hold"]


def test_branch_570_fabric_names_carry_the_branch():
    plan = nd.driver_plan("Debian", "ubuntu", "cuda", "570", "open", fabricmanager=True, fabric="nvswitch")
    assert [p["name"] for p in plan["fabric_packages"]] == ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]


@pytest.mark.parametrize("os_id,major,version_id,expected", [
    ("debian", "12", "12", "debian12"),
    ("ubuntu", "24.04", "24.04", "ubuntu2404"),
    ("ubuntu", "22.04", "22.04", "ubuntu2204"),
    ("rocky", "9", "9.5", "rhel9"),
    ("rhel", "9", "9.4", "rhel9"),
])
def test_cuda_repo_distro(os_id, major, version_id, expected):
    assert nd.cuda_repo_distro(os_id, major, version_id) == expected


@pytest.mark.parametrize("machine,expected", [("x86_64", "x86_64"), ("aarch64", "sbsa")])
def test_cuda_repo_arch(machine, expected):
    assert nd.cuda_repo_arch(machine) == expected


def test_plan_refuses_old_branch_even_if_called_directly():
    with pytest.raises(ValueError, match="535"):
        nd.driver_plan("Debian", "debian", "cuda", "470", "proprietary")


# ---- versions -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("package_version,upstream,branch", [
    ("550.163.01-2", "550.163.01", "550"),          # Debian 13 nvidia-driver (apt-cache policy on trixie)
    ("535.247.01-1~deb12u1", "535.247.01", "535"),  # Debian 12 style
    ("580.95.05-0ubuntu0.24.04.2", "580.95.05", "580"),
    ("3:580.95.05-1.el9", "580.95.05", "580"),
    ("570.86.15-1", "570.86.15", "570"),
])
def test_upstream_version_and_branch(package_version, upstream, branch):
    assert nd.upstream_version(package_version) == upstream
    assert nd.driver_branch(package_version) == int(branch)


@pytest.mark.parametrize("value, branch", [("580", 580), (580, 580), ("R580", 580), ("570-server", 570),
                                           ("440.33.01", 440), (" 535.247.01 ", 535)])
def test_branches_and_versions_name_a_branch(value, branch):
    assert nd.driver_branch(value) == branch


@pytest.mark.parametrize("value", ["", None, "(none)", "none"])
def test_unknown_versions(value):
    assert nd.upstream_version(value) is None
    assert nd.driver_branch(value) is None


@pytest.mark.parametrize("value", ["latest", "58", "5.80", "abc.1"])
def test_what_names_no_branch(value):
    assert nd.driver_branch(value) is None
