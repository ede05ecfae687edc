# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What the nvidia_driver role decides on a node, from what the node says: pure functions.

The module ``gpufleet.cluster.nvidia_driver_state`` reads the files and runs the commands (dpkg status, rpm,
``apt-cache policy``, ``/proc/driver/nvidia/version``, ``modinfo``, ``dkms status``) and hands the text to these
functions; ``tests/unit/test_driver_state.py`` calls them on real outputs. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver as nd
from ansible_collections.gpufleet.cluster.plugins.module_utils.installed_packages import dpkg_stanzas

# Packages of the NVIDIA stack that other roles own (the container toolkit) and this role must never hold.
NOT_OURS_RE = re.compile(r"^(lib)?nvidia-container")
# Kernel module names the driver's module is installed under (Debian renames it to nvidia-current).
MODULE_NAMES = ("nvidia", "nvidia-current")


# Where nvidia-persistenced's unit and binary are looked for, first match first: a local unit before the packaged one.
PERSISTENCED_UNITS = ("/etc/systemd/system/nvidia-persistenced.service",
                      "/usr/lib/systemd/system/nvidia-persistenced.service",
                      "/lib/systemd/system/nvidia-persistenced.service")
PERSISTENCED_BINARIES = ("/usr/bin/nvidia-persistenced", "/usr/sbin/nvidia-persistenced")


def persistenced(root="/"):
    """Where nvidia-persistenced is under ``root``: {"unit_file": the first unit that is not masked (a link to
    /dev/null) or "", "unit_text": its text, "binary": the first binary or "", "masked": the masked unit paths}."""
    def under(path):
        return os.path.join(root, path.lstrip("/"))

    masked = [path for path in PERSISTENCED_UNITS
              if os.path.islink(under(path)) and os.path.realpath(under(path)) == os.devnull]
    unit_file = next((path for path in PERSISTENCED_UNITS if path not in masked and os.path.exists(under(path))), "")
    text = ""
    if unit_file:
        try:
            with open(under(unit_file)) as handle:
                text = handle.read()
        except (IOError, OSError, UnicodeDecodeError):
            text = ""
    binary = next((path for path in PERSISTENCED_BINARIES if os.path.exists(under(path))), "")
    return {"unit_file": unit_file, "unit_text": text, "binary": binary, "masked": masked}


def parse_dpkg_status(text):
    """``/var/lib/dpkg/status`` -> {name: {"version": str, "hold": bool}} for installed packages only."""
    packages = {}
    for fields in dpkg_stanzas(text):
        status = fields.get("status", "").split()
        if len(status) != 3 or status[2] != "installed":
            continue
        packages[fields["package"]] = {"version": fields.get("version", ""), "hold": status[0] == "hold"}
    return packages


def parse_rpm_list(text, locked=""):
    """``rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'`` (+ versionlock list) -> same shape."""
    locked_names = set()
    for line in (locked or "").splitlines():
        match = re.match(r"^(?:\d+:)?([A-Za-z0-9_.+-]+?)-(?:\d+:)?\d[^-]*-[^-]+$", line.strip())
        if match:
            locked_names.add(match.group(1))
    packages = {}
    for line in (text or "").splitlines():
        name, _sep, version = line.partition("\t")
        if name and version:
            packages[name.strip()] = {"version": version.strip(), "hold": name.strip() in locked_names}
    return packages


def parse_apt_policy(text):
    """``apt-cache policy a b ...`` -> {name: {"installed": str or '', "candidate": str or ''}}."""
    result = {}
    current = None
    for line in (text or "").splitlines():
        header = re.match(r"^(\S+):\s*$", line)
        if header:
            current = header.group(1)
            result[current] = {"installed": "", "candidate": ""}
            continue
        field = re.match(r"^\s+(Installed|Candidate):\s*(\S+)", line)
        if field and current:
            value = field.group(2)
            result[current][field.group(1).lower()] = "" if value == "(none)" else value
    return result


def kernel_flavour(release):
    """Flavour of a Debian/Ubuntu kernel release: 6.1.0-26-cloud-amd64 -> cloud-amd64,
    6.12.48+deb13-amd64 -> amd64, 6.8.0-45-generic -> generic, 6.8.0-1015-nvidia -> nvidia."""
    parts = str(release or "").split("-")[1:]
    if parts and parts[0].isdigit():
        parts = parts[1:]
    return "-".join(parts)


def headers_packages(os_family, os_id, release, installed_names=()):
    """Packages that give DKMS the headers of the running kernel and of every kernel installed later.

    Debian: linux-headers-<release> + linux-headers-<flavour>; Ubuntu: linux-headers-<release> + the
    metapackage of the kernel series in use (linux-headers-generic, or -generic-hwe-24.04 when the HWE kernel
    metapackage is installed); EL: kernel-devel-matched (devel of exactly the installed kernels), kernel-headers
    and dkms (EPEL), as NVIDIA's installation guide lists them.
    """
    if os_family == "RedHat":
        return ["kernel-devel-matched", "kernel-headers", "dkms"]
    flavour = kernel_flavour(release)
    meta = "linux-headers-%s" % flavour if flavour else ""
    if os_id == "ubuntu":
        for name in sorted(installed_names):
            hwe = re.match(r"^linux-(?:image|generic|headers)-(\S+?)-hwe-(\d+\.\d+)(-edge)?$", name) or \
                re.match(r"^linux-(generic)-hwe-(\d+\.\d+)(-edge)?$", name)
            if hwe:
                meta = "linux-headers-%s-hwe-%s%s" % (hwe.group(1), hwe.group(2), hwe.group(3) or "")
                break
    return [p for p in ("linux-headers-%s" % release, meta) if p]


def prebuilt_module_packages(templates, release):
    """Fill the {flavour}/{kernel} templates of the plan's prebuilt_modules for the running kernel."""
    return [t.replace("{flavour}", kernel_flavour(release)).replace("{kernel}", release) for t in templates]


def parse_dkms_status(text):
    """``dkms status`` (2.x: 'nvidia, 535.x, K, arch: installed'; 3.x: 'nvidia/535.x, K, arch: installed')
    -> [{"module", "version", "kernel", "arch", "state"}]; 'added' lines have no kernel."""
    entries = []
    for line in (text or "").splitlines():
        line = line.strip()
        if ":" not in line:
            continue
        left, _sep, state = line.rpartition(":")
        parts = [p.strip() for p in left.split(",")]
        if "/" in parts[0]:
            module, version = parts[0].split("/", 1)
            rest = parts[1:]
        else:
            module, version, rest = parts[0], parts[1] if len(parts) > 1 else "", parts[2:]
        entries.append({
            "module": module, "version": version,
            "kernel": rest[0] if rest else "", "arch": rest[1] if len(rest) > 1 else "",
            "state": state.strip().split(" ")[0].strip("()"),
        })
    return entries


def managed_installed(packages, extra=()):
    """Installed packages of the driver stack this role holds (never the container toolkit)."""
    names = [n for n in packages if nd.MANAGED_PACKAGE_RE.match(n) and not NOT_OURS_RE.match(n)]
    names += [n for n in extra if n in packages]
    return sorted(set(names))


def decide(plan, packages, policy, loaded_text, kernel, options):
    """The decisions of one run, as data.

    plan      driver_plan() output
    packages  parse_dpkg_status()/parse_rpm_list() output (installed packages)
    policy    parse_apt_policy() output ({} on dnf)
    loaded_text  /proc/driver/nvidia/version text ('' when no module is loaded)
    kernel    {"running": release, "installed": [releases], "modules": {release: version or ''},
               "headers": {release: bool}, "dkms": [parse_dkms_status entries]}
    options   {"extra": [...], "upgrade": bool, "headers": bool, "gpu_count": int, "container": bool,
               "branch": str, "source": str, "check_mode": bool, "sources_changed": bool, "os_family": str,
               "os_id": str}
    """
    extra = list(options.get("extra") or [])
    release = kernel.get("running", "")
    container = bool(options.get("container"))
    problems, notes = [], []

    prebuilt = prebuilt_module_packages(plan.get("prebuilt_modules") or [], release) if not container else []
    want_headers = bool(options.get("headers")) and plan.get("dkms", True) and not container
    headers = headers_packages(options.get("os_family"), options.get("os_id"), release, packages) \
        if want_headers else []

    driver_packages = list(plan["packages"]) + extra + prebuilt
    installed_version = packages.get(plan["version_package"], {}).get("version", "")
    version_policy = policy.get(plan["version_package"], {})
    candidate = version_policy.get("candidate", "")
    missing_driver = [p for p in driver_packages if p not in packages and not p.startswith("@")]
    if plan["package_manager"] == "dnf":
        missing_driver = [] if installed_version else list(plan["packages"])
    driver_changing = bool(missing_driver) or bool(options.get("upgrade"))

    # The version the fabric packages must match: the driver this run leaves installed.
    target_version = candidate if (driver_changing or not installed_version) else installed_version
    fabric_specs, missing_fabric = [], []
    for item in plan.get("fabric_packages") or []:
        if item["name"] in packages and not driver_changing:
            continue
        if item["pinned"]:
            if not nd.upstream_version(target_version):
                continue
            spec = nd.fabricmanager_spec(item["name"], plan["fabricmanager_pin"], target_version)
        else:
            spec = item["name"]
        fabric_specs.append(spec)
        missing_fabric.append(item["name"])

    missing_headers = [p for p in headers if p not in packages]
    if missing_headers and plan["package_manager"] == "apt" and \
            not (options.get("check_mode") and options.get("sources_changed")):
        running_headers = "linux-headers-%s" % release
        if running_headers in missing_headers and not policy.get(running_headers, {}).get("candidate"):
            problems.append(
                "no %s in the configured package sources: DKMS cannot build the NVIDIA module for the running "
                "kernel %s (a kernel newer or older than the archive offers was booted?). Boot a kernel the "
                "archive carries headers for, or add the source that has them; nothing was changed."
                % (running_headers, release))

    install = []
    if driver_changing:
        install += [p for p in driver_packages if options.get("upgrade") or p in missing_driver]
    install += fabric_specs + missing_headers

    if plan["package_manager"] == "apt" and not candidate and not installed_version:
        if not (options.get("check_mode") and options.get("sources_changed")):
            problems.append(
                "no installable %s package in the configured sources (%s); check the repository "
                "(nvidia_driver_repo_url) and the components. The driver was not installed."
                % (plan["version_package"], options.get("source")))
    branch = nd.branch_decision(options.get("branch"), installed_version,
                                candidate if driver_changing else installed_version, options.get("source"))
    problems += [branch["offered_problem"]] if branch["offered_problem"] else []
    notes += [branch["note"]] if branch["note"] else []

    hold = managed_installed(packages, extra)
    held = sorted(n for n in hold if packages[n]["hold"])
    loaded = nd.loaded_version(loaded_text) or ""
    installed_upstream = nd.upstream_version(installed_version) or ""
    gpu_count = int(options.get("gpu_count") or 0)

    reboot_pending = bool(gpu_count > 0 and installed_upstream and loaded != installed_upstream)
    if reboot_pending:
        reboot_reason = ("kernel module %s is loaded, driver %s is installed" % (loaded, installed_upstream)
                         if loaded else "driver %s is installed but no NVIDIA kernel module is loaded"
                         % installed_upstream)
    else:
        reboot_reason = ""

    build = kernel_build_state(kernel, installed_upstream, container, plan)
    return {
        "installed_version": installed_version,
        "candidate_version": candidate,
        "branch": branch,
        "driver_changing": driver_changing,
        "install": install,
        "missing": missing_driver + missing_fabric + missing_headers,
        "pin_install": [p for p in plan.get("pin_packages") or [] if p not in packages],
        "headers": headers,
        "prebuilt_modules": prebuilt,
        "hold": hold,
        "held": held,
        "hold_todo": [n for n in hold if n not in held],
        "loaded_version": loaded,
        "reboot_pending": reboot_pending,
        "reboot_reason": reboot_reason,
        "kernel": build,
        "problems": problems,
        "notes": notes,
    }


def kernel_build_state(kernel, installed_upstream, container, plan):
    """Whether the kernel module of the installed driver exists for the running and every installed kernel.

    status: ok | missing (the running kernel has no module of this version) | skipped (with reason)
    rebuild: installed kernels whose headers are there but whose module is absent or of another version
    """
    release = kernel.get("running", "")
    base = {"running": release, "installed": list(kernel.get("installed") or []),
            "modules": dict(kernel.get("modules") or {}), "dkms": list(kernel.get("dkms") or []),
            "rebuild": [], "without_headers": []}
    if container:
        base.update(status="skipped", reason=(
            "container: the node shares the host's kernel %s, so no NVIDIA kernel module is built or loaded "
            "here and no headers are installed for it" % release))
        return base
    if not installed_upstream:
        base.update(status="skipped", reason="the driver is not installed yet")
        return base
    modules = base["modules"]
    headers = kernel.get("headers") or {}
    for release_ in base["installed"]:
        if modules.get(release_) == installed_upstream:
            continue
        if headers.get(release_):
            base["rebuild"].append(release_)
        elif plan.get("dkms", True):
            base["without_headers"].append(release_)
    if modules.get(release) == installed_upstream:
        base.update(status="ok", reason="module %s present for the running kernel %s" % (installed_upstream, release))
    else:
        found = modules.get(release) or "none"
        base.update(status="missing", reason=(
            "the running kernel %s has no NVIDIA module %s (found: %s); see `dkms status` and the headers "
            "(linux-headers-%s / kernel-devel)" % (release, installed_upstream, found, release)))
    return base
