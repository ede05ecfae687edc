"""The NVIDIA driver (nvidia_driver) and Docker's nvidia runtime (nvidia_container_toolkit)."""
import re

import pytest

from fleet import scrape

# The package of each driver source that carries the driver itself (nvidia_driver's version package).
DRIVER_PACKAGE = re.compile(r"^(nvidia-driver|nvidia-headless(-no-dkms)?-\d+.*|cuda-drivers(-\d+)?|"
                            r"nvidia-open(-\d+)?)$")
# The packages that build or carry the kernel module.
KERNEL_PACKAGE = re.compile(r"^(nvidia-(open-)?kernel-dkms|nvidia-dkms-\d+.*|nvidia-dkms(-open)?|"
                            r"nvidia-kernel-source-\d+.*)$")


def test_driver_loaded_at_the_inventory_branch(node, expect):
    node.require_gpu()
    branch = expect["driver"]["branch"]
    version = node.read("/proc/driver/nvidia/version")
    assert version, "%s: the nvidia kernel module is not loaded (/proc/driver/nvidia/version missing)" % node.name
    loaded = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+)\.\d+", version)
    assert loaded and loaded.group(1) == branch, (
        "%s runs kernel module %s, the inventory asks for branch %s" % (node.name, loaded and loaded.group(0), branch))
    rows = node.check("nvidia-smi --query-gpu=pci.bus_id,driver_version --format=csv,noheader").strip().splitlines()
    assert len(rows) == len(node.gpus), (
        "%s: nvidia-smi lists %d GPU(s), the PCI bus %d (%s)" % (node.name, len(rows), len(node.gpus), node.gpus))
    for row in rows:
        assert row.split(",")[1].strip().startswith(branch + "."), "%s: %s" % (node.name, row)


def _installed_packages(node):
    """{name: version} of the installed packages (dpkg or rpm)."""
    if node.run("command -v dpkg-query").rc == 0:
        out = node.check("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'")
        # Status abbreviation: wanted state (i install, h hold), then the package's state (i installed).
        return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if len(f) == 3 and f[0][1:] == "i"}
    out = node.check("rpm -qa --qf '%{NAME} %{VERSION}\\n'")
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def _held(node):
    """Names (apt) or name patterns (dnf versionlock) the package manager keeps from moving."""
    if node.run("command -v apt-mark").rc == 0:
        return set(node.check("apt-mark showhold").split())
    out = node.check("dnf versionlock list")
    return {re.sub(r"-\d.*$", "", line.split(":", 1)[-1]) for line in out.split()}


def test_driver_packages_held(node, expect):
    driver = expect["driver"]
    if not driver["hold"]:
        pytest.skip("nvidia_driver_hold is false for %s: the driver packages are meant to move" % node.name)
    installed = _installed_packages(node)
    core = sorted(n for n in installed if DRIVER_PACKAGE.match(n) or KERNEL_PACKAGE.match(n))
    if not core and not node.gpus:
        pytest.skip("%s has no NVIDIA GPU and no driver package installed" % node.name)
    assert any(DRIVER_PACKAGE.match(n) for n in core), "%s: no NVIDIA driver package is installed" % node.name
    version = next(installed[n] for n in core if DRIVER_PACKAGE.match(n))
    assert re.sub(r"^\d+:", "", version).startswith(driver["branch"] + "."), (
        "%s: the driver package is at %s, the inventory asks for branch %s" % (node.name, version, driver["branch"]))
    held = _held(node)
    loose = [n for n in core if n not in held]
    assert not loose, "%s: driver packages not held: %s (held: %s)" % (node.name, loose, sorted(held))
    if node.run("command -v apt-config").rc == 0:
        # What unattended-upgrades reads, from every apt.conf file: regular expressions matched at a name's start.
        dump = node.check("apt-config dump Unattended-Upgrade::Package-Blacklist")
        entries = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "([^"]+)";', dump, re.M)
        open_to_upgrades = [n for n in core if not any(re.match(entry, n) for entry in entries)]
        assert not open_to_upgrades, "%s: unattended-upgrades may upgrade %s (its blacklist: %s)" % (
            node.name, open_to_upgrades, entries)


def test_nvidia_is_the_default_docker_runtime(node, expect):
    toolkit = expect["toolkit"]
    if not node.gpus and not toolkit["force"]:
        pytest.skip("%s has no NVIDIA GPU and nvidia_container_toolkit_force is false: no nvidia runtime, Docker "
                    "keeps its own default" % node.name)
    if not toolkit["configure_docker"]:
        pytest.skip("nvidia_container_toolkit_configure_docker is false for %s" % node.name)
    info = node.docker_info
    runtimes = info.get("Runtimes") or {}
    assert "nvidia" in runtimes, "%s: Docker knows no nvidia runtime (%s)" % (node.name, sorted(runtimes))
    assert runtimes["nvidia"].get("path") == toolkit["runtime_path"], runtimes["nvidia"]
    if toolkit["default_runtime"]:
        assert info.get("DefaultRuntime") == "nvidia", (
            "%s: Docker's default runtime is %s" % (node.name, info.get("DefaultRuntime")))
    else:
        pytest.skip("nvidia_container_toolkit_default_runtime is false for %s: nvidia is registered, "
                    "not the default" % node.name)


def test_dcgm_exporter_answers(node, expect):
    monitoring = expect["monitoring"]
    node.require_gpu()
    if not monitoring["dcgm_exporter"]:
        pytest.skip("dcgm-exporter is switched off for %s (gpu_monitoring_dcgm_enabled/_exporter_enabled)" % node.name)
    body = scrape(node, expect, monitoring["dcgm_exporter_port"])
    assert "DCGM_FI_DEV_GPU_TEMP" in body or "DCGM_FI_DEV_SM_CLOCK" in body, (
        "%s: dcgm-exporter answers without GPU metrics: %s" % (node.name, body[:300]))
