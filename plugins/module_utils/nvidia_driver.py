# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure policy for the nvidia_driver role: branch floor, package selection per source, versions.

No Ansible import here: the filter plugin ``gpufleet.cluster.nvidia_driver`` exposes these functions
to the role, and ``tests/unit/test_nvidia_driver_*.py`` call them directly for the sources that
cannot be installed in the test containers (NVIDIA's CUDA repository, Ubuntu, RHEL).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Oldest driver branch gpufleet installs (535 LTSB; end of life June 2026 but still allowed).
BRANCH_FLOOR = 535
# From this branch on NVIDIA's repositories ship the fabric manager without the branch in its name.
FABRICMANAGER_UNVERSIONED_FROM = 580

SOURCES = ("debian", "ubuntu", "cuda")
KERNEL_MODULES = ("open", "proprietary", "auto")

# Package names that belong to the driver stack; used to find what this role holds or released.
MANAGED_PACKAGE_RE = re.compile(
    r"^(nvidia-|libnvidia-|libcuda|cuda-drivers|firmware-nvidia-|xserver-xorg-video-nvidia|"
    r"kmod-nvidia|nvidia_)"
)

_VERSION_RE = re.compile(r"^(?:\d+:)?(\d+\.\d+(?:\.\d+)?)")
_PROC_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")


def branch_problem(branch, floor=BRANCH_FLOOR):
    """Return None when ``branch`` is an acceptable driver branch, else a sentence for the operator."""
    text = str(branch if branch is not None else "").strip()
    if not re.match(r"^[0-9]{3,}$", text):
        return (
            "nvidia_driver_branch %r is not a driver branch number; set it to a branch such as "
            "\"580\" (the minimum is %d)" % (text, floor)
        )
    if int(text) < floor:
        return (
            "nvidia_driver_branch %s is older than the supported minimum %d; gpufleet installs "
            "branch %d or newer (580 is the current long-term branch)" % (text, floor, floor)
        )
    return None


def kernel_flavour(kernel_modules, turing_or_newer):
    """Resolve open/proprietary/auto: auto means open when every GPU is Turing or newer."""
    if kernel_modules not in KERNEL_MODULES:
        raise ValueError("nvidia_driver_kernel_modules must be one of %s" % ", ".join(KERNEL_MODULES))
    if kernel_modules == "auto":
        return "open" if turing_or_newer else "proprietary"
    return kernel_modules


def upstream_version(package_version):
    """'550.163.01-2' or '3:580.95.05-1.el9' -> '550.163.01'; None when it is not a driver version."""
    match = _VERSION_RE.match(str(package_version or "").strip())
    return match.group(1) if match else None


def branch_of(version):
    """'580.95.05' (or a package version) -> '580'; None when unknown."""
    upstream = upstream_version(version)
    return upstream.split(".")[0] if upstream else None


def loaded_version(proc_text):
    """Version of the loaded kernel module from /proc/driver/nvidia/version text, else None."""
    for line in (proc_text or "").splitlines():
        if line.startswith("NVRM version:"):
            match = _PROC_VERSION_RE.search(line + " ")
            if match:
                return match.group(1)
    return None


def cuda_repo_distro(os_id, os_major, version_id=""):
    """Directory name of NVIDIA's CUDA repository for an OS: debian12, ubuntu2404, rhel9."""
    if os_id == "ubuntu":
        return "ubuntu" + str(version_id or os_major).replace(".", "")
    if os_id == "debian":
        return "debian" + str(os_major)
    if os_id in ("rhel", "rocky", "almalinux", "centos"):
        return "rhel" + str(os_major)
    raise ValueError("NVIDIA's CUDA repository has no packages for %s %s" % (os_id, os_major))


def cuda_repo_arch(machine):
    """CUDA repository architecture directory for a kernel machine name."""
    return {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}.get(machine, machine)


def driver_plan(os_family, os_id, source, branch, flavour, fabricmanager=False):
    """Everything the role installs for one source, as plain data.

    Returns a dict:
      packages           packages to install (apt/dnf names; a dnf module spec starts with '@')
      hold               packages to hold once installed (apt-mark hold / dnf versionlock patterns)
      version_package    installed package whose version is the driver version
      fabricmanager      fabric manager package name ('' when not wanted)
      fabricmanager_pin  how its version is pinned: 'apt' (name=version*), 'dnf' (name-version) or ''
      package_manager    'apt' or 'dnf'
    """
    problem = branch_problem(branch)
    if problem:
        raise ValueError(problem)
    if source not in SOURCES:
        raise ValueError("nvidia_driver_source must be one of %s" % ", ".join(SOURCES))
    if flavour not in ("open", "proprietary"):
        raise ValueError("kernel module flavour must be open or proprietary, not %r" % (flavour,))
    branch = str(branch)
    open_modules = flavour == "open"
    plan = {"fabricmanager": "", "fabricmanager_pin": "", "package_manager": "apt"}

    if source == "debian":
        if os_id != "debian":
            raise ValueError("source debian installs Debian's non-free packages and needs Debian, not %s" % os_id)
        kernel = "nvidia-open-kernel-dkms" if open_modules else "nvidia-kernel-dkms"
        plan["packages"] = [
            "nvidia-driver", kernel, "firmware-nvidia-gsp", "nvidia-smi", "libcuda1", "nvidia-persistenced",
        ]
        plan["hold"] = list(plan["packages"])
        plan["version_package"] = "nvidia-driver"
        if fabricmanager:
            raise ValueError(
                "Debian does not package NVIDIA Fabric Manager, which NVSwitch systems need; "
                "set nvidia_driver_source: cuda (NVIDIA's repository or its mirror) for this host"
            )
        return plan

    if source == "ubuntu":
        if os_id != "ubuntu":
            raise ValueError("source ubuntu installs Ubuntu's -server driver packages and needs Ubuntu, not %s" % os_id)
        suffix = "-server-open" if open_modules else "-server"
        driver = "nvidia-driver-%s%s" % (branch, suffix)
        plan["packages"] = [driver, "nvidia-utils-%s-server" % branch]
        plan["hold"] = [
            driver,
            "nvidia-dkms-%s%s" % (branch, suffix),
            "nvidia-kernel-common-%s-server" % branch,
            "nvidia-utils-%s-server" % branch,
            "nvidia-compute-utils-%s-server" % branch,
            "libnvidia-compute-%s-server" % branch,
        ]
        plan["version_package"] = driver
        if fabricmanager:
            # Ubuntu's archive keeps the branch in the fabric manager name for every branch.
            plan["fabricmanager"] = "nvidia-fabricmanager-%s" % branch
            plan["fabricmanager_pin"] = "apt"
            plan["hold"].append(plan["fabricmanager"])
        return plan

    # source == "cuda": NVIDIA's CUDA repository (or a mirror of it)
    fm_name = (
        "nvidia-fabricmanager" if int(branch) >= FABRICMANAGER_UNVERSIONED_FROM
        else "nvidia-fabricmanager-%s" % branch
    )
    if os_family == "RedHat":
        plan["package_manager"] = "dnf"
        stream = "%s-open" % branch if open_modules else "%s-dkms" % branch
        profile = "/fm" if fabricmanager else ""
        plan["packages"] = ["@nvidia-driver:%s%s" % (stream, profile)]
        plan["hold"] = ["nvidia-driver", "nvidia-driver-*", "kmod-nvidia-*", "nvidia-kmod-common",
                        "libnvidia-*", "nvidia-persistenced", "nvidia-modprobe"]
        plan["version_package"] = "nvidia-driver"
        if fabricmanager:
            plan["fabricmanager"] = fm_name
            plan["fabricmanager_pin"] = "dnf"
            plan["hold"].append(fm_name)
        return plan
    if os_family != "Debian":
        raise ValueError("NVIDIA's CUDA repository source supports Debian, Ubuntu and RHEL-like systems")
    driver = "nvidia-open-%s" % branch if open_modules else "cuda-drivers-%s" % branch
    plan["packages"] = [driver]
    plan["hold"] = [driver, "nvidia-persistenced", "libnvidia-compute-%s" % branch,
                    "nvidia-kernel-common-%s" % branch, "nvidia-utils-%s" % branch,
                    ("nvidia-dkms-%s-open" if open_modules else "nvidia-dkms-%s") % branch]
    plan["version_package"] = driver
    if fabricmanager:
        plan["fabricmanager"] = fm_name
        plan["fabricmanager_pin"] = "apt"
        plan["hold"].append(fm_name)
    return plan


def fabricmanager_spec(name, pin, driver_version):
    """Package spec that installs the fabric manager of exactly ``driver_version``."""
    upstream = upstream_version(driver_version)
    if not name:
        return ""
    if not upstream:
        raise ValueError("the driver version %r is unknown; cannot match the fabric manager to it" % (driver_version,))
    if pin == "dnf":
        return "%s-%s" % (name, upstream)
    return "%s=%s-*" % (name, upstream)


def managed_packages(names):
    """Keep the package names that belong to the NVIDIA driver stack."""
    return sorted(n for n in (names or []) if MANAGED_PACKAGE_RE.match(n))


def _components_line(line, suites, wanted):
    """Rewrite one-line-format 'deb ...' entries of the suites to carry the wanted components."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return line, False
    match = re.match(r"^(\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?\S+\s+)(\S+)((?:\s+\S+)*)\s*$", line)
    if not match or match.group(2) not in suites:
        return line, False
    components = match.group(3).split()
    if "main" not in components:
        # A third-party repository that reuses the codename as its suite (e.g. Docker's "trixie stable").
        return line, False
    missing = [c for c in wanted if c not in components]
    if not missing:
        return line, True
    return "%s%s %s" % (match.group(1), match.group(2), " ".join(components + missing)), True


def add_apt_components(text, codename, components):
    """Add components to the existing Debian entries of ``codename`` (and its -updates/-security).

    An entry of the distribution is one for those suites that carries the ``main`` component; third-party
    repositories that reuse the codename as their suite (Docker's "trixie stable") are left alone.

    Handles the one-line format (sources.list) and deb822 stanzas (``*.sources``) and edits the
    entries in place, so the host never gets a second entry for a suite it already has.
    Returns ``{"content": new_text, "found": number_of_matching_entries, "changed": bool}``.
    """
    suites = {codename, codename + "-updates", codename + "-security"}
    wanted = list(components)
    lines = (text or "").split("\n")
    found = 0
    out = []
    # deb822: stanzas separated by blank lines; Suites/Components may come in any order.
    stanza = []

    def flush():
        count = 0
        suites_line = [l for l in stanza if re.match(r"^Suites:", l, re.IGNORECASE)]
        comp_idx = [i for i, l in enumerate(stanza) if re.match(r"^Components:", l, re.IGNORECASE)]
        enabled = not any(re.match(r"^Enabled:\s*no\s*$", l, re.IGNORECASE) for l in stanza)
        if suites_line and comp_idx and enabled:
            stanza_suites = suites_line[0].split(":", 1)[1].split()
            if any(s in suites for s in stanza_suites):
                count = 1
                idx = comp_idx[0]
                current = stanza[idx].split(":", 1)[1].split()
                if "main" not in current:
                    out.extend(stanza)
                    del stanza[:]
                    return 0
                missing = [c for c in wanted if c not in current]
                if missing:
                    stanza[idx] = "Components: " + " ".join(current + missing)
        out.extend(stanza)
        del stanza[:]
        return count

    for line in lines:
        if re.match(r"^\s*(deb|deb-src)\s", line) or line.lstrip().startswith("#") and not stanza:
            found += flush()
            new_line, matched = _components_line(line, suites, wanted)
            found += int(matched)
            out.append(new_line)
        elif not line.strip():
            found += flush()
            out.append(line)
        else:
            stanza.append(line)
    found += flush()
    content = "\n".join(out)
    return {"content": content, "found": found, "changed": content != (text or "")}
