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
# From this branch on NVIDIA's repositories ship the fabric manager (and NSCQ, IMEX) without the branch in the name.
FABRICMANAGER_UNVERSIONED_FROM = 580
# From this branch on every NVIDIA apt package drops the branch (cuda-drivers-580 -> cuda-drivers,
# nvidia-dkms-580 -> nvidia-dkms); nvidia-driver-pinning-<branch> selects the branch instead.
FLAT_NAMES_FROM = 590

SOURCES = ("debian", "ubuntu", "cuda")
KERNEL_MODULES = ("open", "proprietary", "auto")
FABRICMANAGER_CHOICES = ("auto", "always", "never")
UBUNTU_MODULES = ("auto", "dkms", "prebuilt")

# Package names that belong to the driver stack; used to find what this role holds or released.
MANAGED_PACKAGE_RE = re.compile(
    r"^(nvidia-|libnvidia-|libcuda|cuda-drivers|firmware-nvidia-|xserver-xorg-video-nvidia|"
    r"kmod-nvidia|nvidia_)"
)

_VERSION_RE = re.compile(r"^(?:\d+:)?(\d+\.\d+(?:\.\d+)?)")
_PROC_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")


# A branch, or the start of a driver or package version: an optional epoch ('3:'), an optional 'R', then the branch.
_BRANCH_RE = re.compile(r"^(?:\d+:)?[rR]?(\d{3,})(?:$|[.\-\s])")


def driver_branch(value):
    """The driver branch a branch, driver version or package version names, as an int; None when it names none.

    '580', 580, 'R580', '580.95.05', '580.95.05-0ubuntu0.24.04.2', '3:580.95.05-1.el9' and '570-server' name a
    branch; '', None, '(none)', 'latest', '58' and '5.80' do not."""
    match = _BRANCH_RE.match(str(value if value is not None else "").strip())
    return int(match.group(1)) if match else None


def branch_decision(requested, installed_version="", offered_version="", source="", floor=BRANCH_FLOOR):
    """Every decision about the driver branch, made here once: the nvidia_driver role's input check, its plan, the
    nvidia_driver_state module (and through it the role's tasks) and the validate role's topology check take theirs
    from this function.

    requested          the branch asked for (nvidia_driver_branch): digits only, ``floor`` or newer (a check of
                       what is installed passes None and reads ``installed`` and ``installed_ok`` only).
    installed_version  the version of the installed (or loaded) driver; '' when there is none.
    offered_version    the driver version the run leaves installed (the source's candidate when the driver
                       changes); '' when unknown.
    source             the package source, for the sentences.

    Returns a dict:
      requested        the branch asked for, as text ('' for None)
      problem          why the requested branch is refused; '' when it is acceptable
      installed        the installed driver's branch as text, None when none is installed or it names no branch
      installed_ok     the installed driver is of branch ``floor`` or newer
      matches          the installed driver is of the requested branch
      change           a driver of another branch than the requested one is installed: its locks are released
                       and, on dnf, its module stream reset before the requested one is installed
      offered          the offered driver's branch as text, None when unknown
      offered_problem  the source offers a driver older than the floor: the run stops; '' when not
      note             the source offers another branch than the requested one, which is then installed; '' when not
    """
    text = "" if requested is None else str(requested).strip()
    problem = ""
    if not re.match(r"^[0-9]{3,}$", text):
        problem = ("nvidia_driver_branch %r is not a driver branch number; set it to a branch such as "
                   "\"580\" (the minimum is %d)" % (text, floor))
    elif int(text) < floor:
        problem = ("nvidia_driver_branch %s is older than the supported minimum %d; gpufleet installs "
                   "branch %d or newer (580 is the current long-term branch)" % (text, floor, floor))
    installed = _branch_text(installed_version)
    offered = _branch_text(offered_version)
    decision = {
        "requested": text,
        "problem": problem,
        "installed": installed,
        "installed_ok": installed is not None and int(installed) >= floor,
        "matches": installed == text,
        "change": bool(installed_version) and installed != text,
        "offered": offered,
        "offered_problem": "",
        "note": "",
    }
    if offered_version and (offered is None or int(offered) < floor):
        decision["offered_problem"] = (
            "the %s source offers driver %s, older than the supported minimum branch %d; use "
            "nvidia_driver_source: cuda (NVIDIA's repository or a mirror) on this host. The driver was not installed."
            % (source, offered_version, floor))
    if offered_version and offered != text:
        decision["note"] = (
            "nvidia_driver_branch is %s but the %s packages carry branch %s (%s); that branch is installed. Set "
            "nvidia_driver_branch to it, or use nvidia_driver_source: cuda for exactly %s."
            % (text, source, offered, offered_version, text))
    return decision


def _branch_text(version):
    branch = driver_branch(version)
    return None if branch is None else str(branch)


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


def _fabric_names(branch, unversioned_from=FABRICMANAGER_UNVERSIONED_FROM, rhel=False):
    """Fabric manager, NSCQ and IMEX package names of NVIDIA's repository for a branch."""
    # RHEL's CUDA repository selects branches with dnf module streams, so its names never carry the branch.
    flat = rhel or int(branch) >= unversioned_from
    fm = ("nvidia-fabric-manager" if rhel else "nvidia-fabricmanager") + ("" if flat else "-%s" % branch)
    return {
        "fabricmanager": fm,
        "nscq": "libnvidia-nscq" if flat else "libnvidia-nscq-%s" % branch,
        "imex": "nvidia-imex" if flat else "nvidia-imex-%s" % branch,
    }


def _add_fabric(plan, names, pin, fabricmanager, fabric, imex):
    """Fabric manager (+ NSCQ, + NVLSM on NVLink 5, + IMEX on Grace-Blackwell racks) into the plan."""
    if not fabricmanager:
        return
    plan["fabricmanager"] = names["fabricmanager"]
    plan["fabricmanager_pin"] = pin
    # NSCQ (the switch-query library DCGM and nvidia-smi use for NVSwitch health) ships with the fabric manager,
    # version-locked to the driver like it; NVLSM (NVLink subnet manager) is what the fabric manager drives on
    # Blackwell's NVLink 5 switches; IMEX shares GPU memory across the nodes of a GB200/GB300 NVL rack.
    plan["fabric_packages"] = [
        {"name": names["fabricmanager"], "pinned": True},
        {"name": names["nscq"], "pinned": True},
    ]
    if fabric == "nvlink5":
        plan["fabric_packages"].append({"name": "nvlsm", "pinned": False})
    if imex:
        plan["fabric_packages"].append({"name": names["imex"], "pinned": True})
    plan["hold"].extend(p["name"] for p in plan["fabric_packages"] if p["pinned"])


def driver_plan(os_family, os_id, source, branch, flavour, fabricmanager=False, fabric="", imex=False,
                ubuntu_modules="dkms"):
    """Everything the role installs for one source, as plain data.

    ``fabric`` is gpufleet_node.nvlink_fabric ('nvswitch', 'nvlink5' or ''), ``imex`` whether the GPUs are
    Grace-Blackwell rack parts; ``ubuntu_modules`` is 'dkms' (build with DKMS against the headers) or
    'prebuilt' (Ubuntu's signed linux-modules-nvidia packages: no DKMS, no MOK under Secure Boot).

    Returns a dict:
      packages           packages to install (apt/dnf names; a dnf module spec starts with '@')
      pin_packages       packages installed before the driver that pin its branch (NVIDIA's repo from 590)
      hold               packages to hold once installed (apt-mark hold / dnf versionlock patterns)
      version_package    installed package whose version is the driver version
      fabricmanager      fabric manager package name ('' when not wanted)
      fabricmanager_pin  how its version is pinned: 'apt' (name=version*), 'dnf' (name-version) or ''
      fabric_packages    [{name, pinned}]: fabric manager, NSCQ, NVLSM, IMEX as the node needs them
      prebuilt_modules   package names of prebuilt kernel modules, per kernel ('{kernel}' stands for a release)
      signed_modules     True when the kernel modules come signed by the distribution (no MOK needed)
      dkms               True when the kernel module is built by DKMS on the node (headers needed)
      package_manager    'apt' or 'dnf'
    """
    problem = branch_decision(branch)["problem"]
    if problem:
        raise ValueError(problem)
    if source not in SOURCES:
        raise ValueError("nvidia_driver_source must be one of %s" % ", ".join(SOURCES))
    if flavour not in ("open", "proprietary"):
        raise ValueError("kernel module flavour must be open or proprietary, not %r" % (flavour,))
    if ubuntu_modules not in ("dkms", "prebuilt"):
        raise ValueError("nvidia_driver_ubuntu_modules must be dkms or prebuilt, not %r" % (ubuntu_modules,))
    branch = str(branch)
    open_modules = flavour == "open"
    plan = {"fabricmanager": "", "fabricmanager_pin": "", "package_manager": "apt", "pin_packages": [],
            "fabric_packages": [], "prebuilt_modules": [], "signed_modules": False, "dkms": True}

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
                "Debian does not package NVIDIA Fabric Manager, which NVSwitch and NVLink 5 systems need; "
                "set nvidia_driver_source: cuda (NVIDIA's repository or its mirror) for this host"
            )
        return plan

    if source == "ubuntu":
        if os_id != "ubuntu":
            raise ValueError("source ubuntu installs Ubuntu's -server driver packages and needs Ubuntu, not %s" % os_id)
        # Headless server packages (no X/desktop stack), as NVIDIA's own Ansible role and DeepOps install them.
        suffix = "-server-open" if open_modules else "-server"
        utils = "nvidia-utils-%s-server" % branch
        if ubuntu_modules == "prebuilt":
            # Canonical builds and signs the modules per kernel (linux-restricted-modules): they load under
            # Secure Boot without a MOK. One metapackage follows the kernel flavour, one matches the running kernel.
            driver = "nvidia-headless-no-dkms-%s%s" % (branch, suffix)
            plan["prebuilt_modules"] = ["linux-modules-nvidia-%s%s-{flavour}" % (branch, suffix),
                                        "linux-modules-nvidia-%s%s-{kernel}" % (branch, suffix)]
            plan["signed_modules"] = True
            plan["dkms"] = False
            kernel_pkg = "nvidia-kernel-source-%s%s" % (branch, suffix)
        else:
            driver = "nvidia-headless-%s%s" % (branch, suffix)
            kernel_pkg = "nvidia-dkms-%s%s" % (branch, suffix)
        plan["packages"] = [driver, utils]
        plan["hold"] = [
            driver, kernel_pkg,
            "nvidia-kernel-common-%s-server" % branch,
            utils,
            "nvidia-compute-utils-%s-server" % branch,
            "libnvidia-compute-%s-server" % branch,
        ]
        plan["version_package"] = driver
        # Ubuntu's archive keeps the branch in the fabric manager's (and NSCQ's) name for every branch.
        _add_fabric(plan, _fabric_names(branch, unversioned_from=10 ** 6), "apt", fabricmanager, fabric, imex)
        return plan

    # source == "cuda": NVIDIA's CUDA repository (or a mirror of it)
    if os_family == "RedHat":
        plan["package_manager"] = "dnf"
        stream = "%s-open" % branch if open_modules else "%s-dkms" % branch
        profile = "/fm" if fabricmanager else ""
        plan["packages"] = ["@nvidia-driver:%s%s" % (stream, profile)]
        plan["hold"] = ["nvidia-driver", "nvidia-driver-*", "kmod-nvidia-*", "nvidia-kmod-common",
                        "libnvidia-*", "nvidia-persistenced", "nvidia-modprobe"]
        plan["version_package"] = "nvidia-driver"
        _add_fabric(plan, _fabric_names(branch, rhel=True), "dnf", fabricmanager, fabric, imex)
        return plan
    if os_family != "Debian":
        raise ValueError("NVIDIA's CUDA repository source supports Debian, Ubuntu and RHEL-like systems")
    if int(branch) >= FLAT_NAMES_FROM:
        # From 590 NVIDIA's apt packages drop the branch from their names; the branch is chosen by installing
        # nvidia-driver-pinning-<branch> first (NVIDIA Driver Installation Guide r590, "Version locking").
        driver = "nvidia-open" if open_modules else "cuda-drivers"
        plan["pin_packages"] = ["nvidia-driver-pinning-%s" % branch]
        plan["hold"] = [driver, "nvidia-driver-pinning-%s" % branch, "nvidia-persistenced", "libnvidia-compute",
                        "nvidia-kernel-common", "nvidia-utils", "nvidia-dkms-open" if open_modules else "nvidia-dkms"]
    else:
        driver = "nvidia-open-%s" % branch if open_modules else "cuda-drivers-%s" % branch
        plan["hold"] = [driver, "nvidia-persistenced", "libnvidia-compute-%s" % branch,
                        "nvidia-kernel-common-%s" % branch, "nvidia-utils-%s" % branch,
                        ("nvidia-dkms-%s-open" if open_modules else "nvidia-dkms-%s") % branch]
    plan["packages"] = [driver]
    plan["version_package"] = driver
    _add_fabric(plan, _fabric_names(branch), "apt", fabricmanager, fabric, imex)
    return plan


def _flag(value):
    """A fact read as Ansible's bool filter reads it: True, 1, 'yes', 'on', 'true', 'y', 't', '1' are true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "1.0", "y", "yes", "on", "true", "t")


def node_driver_plan(node, source, branch, kernel_modules="auto", fabricmanager="auto", ubuntu_modules="auto"):
    """driver_plan() for a node as preflight describes it (gpufleet_node), with the role's settings as given.

    The settings' ``auto`` is decided here: kernel_modules auto is open when every GPU is Turing or newer;
    fabricmanager auto installs the fabric manager where preflight found NVSwitches on the PCI bus or an NVLink 5
    fabric, always and never say so; ubuntu_modules auto takes Canonical's signed prebuilt modules under Secure Boot
    (no MOK needed) and DKMS otherwise. NVLSM follows gpufleet_node.nvlink_fabric, IMEX gpufleet_node.imex.

    Returns driver_plan()'s dict with the decisions it was made from: ``source``, ``flavour`` (open or
    proprietary) and ``ubuntu_modules`` (dkms or prebuilt).
    """
    if not isinstance(node, dict) or not isinstance(node.get("os"), dict):
        raise ValueError("nvidia_driver_plan expects gpufleet_node (with os.family and os.id), got %r" % (node,))
    if fabricmanager not in FABRICMANAGER_CHOICES:
        raise ValueError("nvidia_driver_fabricmanager must be one of %s" % ", ".join(FABRICMANAGER_CHOICES))
    if ubuntu_modules not in UBUNTU_MODULES:
        raise ValueError("nvidia_driver_ubuntu_modules must be one of %s" % ", ".join(UBUNTU_MODULES))
    flavour = kernel_flavour(kernel_modules, node.get("gpus_turing_or_newer", False))
    fabric = node.get("nvlink_fabric") or ""
    switches = _flag(node.get("nvswitch", False)) or len(fabric) > 0
    wanted = fabricmanager == "always" or (fabricmanager == "auto" and switches)
    if ubuntu_modules == "auto":
        ubuntu_modules = "prebuilt" if node.get("secure_boot") == "enabled" else "dkms"
    plan = driver_plan(node["os"].get("family"), node["os"].get("id"), source, branch, flavour, wanted, fabric,
                       node.get("imex") or False, ubuntu_modules)
    plan.update(source=source, flavour=flavour, ubuntu_modules=ubuntu_modules)
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
