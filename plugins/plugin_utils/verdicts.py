# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure verdicts of the validate role's steps. No Ansible import here.

Each ``<step>_verdict`` function takes the results the role's tasks register, as Ansible registers them (a
command's ``rc``/``stdout``/``stderr``/``stdout_lines``, ``skipped``, a module's ``msg``, uri's ``status`` and
``content``, ...), and returns ``{"status": "passed"|"failed"|"skipped", "reason": str, "detail": dict}``, the
shape ``roles/validate/tasks/record.yml`` appends to the node's report.
``pcie_verdict`` takes the ``gpufleet_node`` fact instead: preflight's node_facts read the PCIe links already, so
that step runs nothing on the node.

Two rules hold for every step:

* a step that could not run is ``skipped`` with the reason it could not, never ``passed``;
* a check whose tool errored is ``failed`` with the tool's last meaningful line (stderr first, then stdout,
  then the module's message).

Registered results are read with ``.get`` throughout: a module that failed under ``failed_when: false`` returns
fewer keys than one that succeeded, and a skipped task returns only ``skipped`` and ``skip_reason``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.pcie_health import link_problems

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

# A line that carries nothing but table borders (dcgmi's +----+ and |----| rules).
BORDER_LINE = re.compile(r"^[\s+=|-]*$")
# One row of dcgmi's result table: | <name> | <cell> |
DIAG_ROW = re.compile(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")
# A result cell: "Pass", "Fail - GPU: 0", "Pass - All" (DCGM 3) or "GPU0: Fail" (DCGM 4 entity rows).
DIAG_RESULT = re.compile(r"^(?:[A-Za-z_]+\d+:\s*)?(Pass|Fail|Warn|Skip|Not Run|Error)(?:\s+-\s+.*)?$")
# Name column of a message row ("Warning", "Warning: GPU0", "Info: GPU1"): text, not a test.
DIAG_MESSAGE = re.compile(r"^(Warning|Info|Error)(:.*)?$")
DIAG_FAILING = ("Fail", "Error")
SSH_AUDIT_FINDING = re.compile(r"\[(fail|warn)\]")
# What the command module says of any non-zero exit: no news about the tool's own error.
COMMAND_NONZERO = "non-zero return code"


def verdict(status, reason, detail=None):
    """The record one step leaves in the report."""
    return {"status": status, "reason": reason, "detail": detail if detail is not None else {}}


def is_skipped(result):
    """What Ansible's ``is skipped`` test says of a registered result; a missing result did not run either."""
    return result is None or bool(result.get("skipped", False))


def _lines(result, key):
    """``<key>_lines`` of a registered result, or ``<key>`` split into lines."""
    lines = result.get(key + "_lines")
    if isinstance(lines, list):
        return [str(line) for line in lines]
    return str(result.get(key) or "").splitlines()


def _meaningful(lines):
    return [line.strip() for line in lines if not BORDER_LINE.match(line)]


def one_line(text):
    """A multi-line message on one line: "head:\\na\\nb" -> "head: a; b", "a\\nb" -> "a; b"."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return lines[0] + " " + "; ".join(lines[1:])
    return "; ".join(lines)


def last_line(result, default=""):
    """The last meaningful line a tool left: stderr's, else stdout's, else its module's message.

    A module that crashed (``MODULE FAILURE``) gives the last line of its own stderr or stdout instead of
    Ansible's generic message.
    """
    for key in ("stderr", "stdout", "module_stderr", "module_stdout"):
        lines = _meaningful(_lines(result, key))
        if lines:
            return lines[-1]
    msg = one_line(result.get("msg"))
    return msg if msg and msg != COMMAND_NONZERO else default


def module_error(result):
    """The message of a module that failed (under ``failed_when: false``), or "" when it did not fail.

    Modules that succeed return no ``msg``, so its presence (or ``failed``) is the failure.
    """
    if result is None or not (result.get("failed") or "msg" in result):
        return ""
    msg = str(result.get("msg") or "")
    if msg.startswith("MODULE FAILURE") or not msg.strip():
        return last_line(result, one_line(msg) or "module failed")
    return one_line(msg)


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def topology_verdict(topology):
    """Verdict of the ``topology`` step from the registered ``gpufleet.cluster.gpu_topology`` result.

    failed: the violated expectations; skipped: no NVIDIA GPU (with nvidia-smi's reason); passed: the summary.
    """
    ran = not is_skipped(topology)
    topology = topology or {}
    topo = (topology.get("ansible_facts") or {}).get("gpu_topology") or {}
    detail = {
        "gpu_count": topo.get("gpu_count"),
        "driver_version": topo.get("driver_version"),
        "summary": topo.get("summary") or "",
        "expectations": topology.get("expectations") or {},
    }
    if not ran:
        return verdict(SKIPPED, "gpu_topology did not run", detail)
    violations = topology.get("violations") or topo.get("violations") or []
    if violations:
        return verdict(FAILED, "; ".join(violations), detail)
    error = module_error(topology) if not topo else ""
    if error:
        return verdict(FAILED, error, detail)
    if _int(topo.get("gpu_count")) == 0:
        reason = topo.get("reason") or ""
        return verdict(SKIPPED, "no NVIDIA GPU" + (": " + reason if reason else ""), detail)
    return verdict(PASSED, topo.get("summary") or "", detail)


def _link_text(link):
    """{"speed_gts": 32.0, "width": 16, ...} -> "32GT/s x16"; None -> "not read"."""
    if not link:
        return "not read"
    speed, width = link.get("speed_gts"), link.get("width")
    return "%s x%s" % (("%gGT/s" % speed) if speed is not None else "unknown speed",
                       width if width is not None else "?")


def _counted(devices, kind):
    count = len([device for device in devices if device.get("kind") == kind])
    return "%d %s%s" % (count, kind, "" if count == 1 else "s") if count else ""


def pcie_verdict(node, enabled=True):
    """Verdict of the ``pcie`` step from the ``gpufleet_node`` fact, whose ``pcie`` entry node_facts reads from
    sysfs: pcie_health.sysfs_link() of every NVIDIA GPU and Mellanox/NVIDIA NIC, with its ``kind``.

    failed: pcie_health.link_problems() finds problems (a link narrower than the device can do, a NIC slower),
    each naming the device's address, the current and the capable value; skipped: check off, a fact without
    ``pcie`` (read by an older node_facts), no NVIDIA GPU or Mellanox NIC, or no link that could be read (a
    container or a VM whose sysfs has no link files); passed: otherwise, with link_problems()' notes (an idle
    GPU's lower speed is power saving, a device whose link could not be read) in the reason.
    ``detail``: devices (address, kind, driver, current and capable link), problems and notes.
    """
    node = node or {}
    if not enabled:
        return verdict(SKIPPED, "check off")
    if "pcie" not in node:
        return verdict(SKIPPED, "gpufleet_node has no PCIe links (read by an older node_facts): run preflight again")
    devices = node.get("pcie") or []
    found = link_problems(devices)
    detail = {
        "devices": [{"address": device.get("address"), "kind": device.get("kind"), "driver": device.get("driver"),
                     "current": _link_text(device.get("link_status")), "capable": _link_text(device.get("link_cap"))}
                    for device in devices],
        "problems": found["problems"],
        "notes": found["notes"],
    }
    if not devices:
        container = " in this %s container" % node.get("virtualization") if node.get("container") else ""
        return verdict(SKIPPED, "no NVIDIA GPU or Mellanox NIC under /sys/bus/pci/devices" + container, detail)
    if found["problems"]:
        return verdict(FAILED, "; ".join(problem["message"] for problem in found["problems"]), detail)
    unread = [note for note in found["notes"] if note["what"] == "link"]
    notes = "; ".join(note["message"] for note in found["notes"])
    if len(unread) == len(devices):
        where = " (a %s container)" % node.get("virtualization") if node.get("container") else ""
        return verdict(SKIPPED, "PCIe links could not be read%s: %s" % (where, notes), detail)
    read = [device for device in devices if device.get("address") not in set(note["address"] for note in unread)]
    what = " and ".join(text for text in (_counted(read, "GPU"), _counted(read, "NIC")) if text)
    speeds = [note for note in found["notes"] if note["what"] == "speed"]
    reason = "PCIe links of %s at their capable width%s" % (what, "" if speeds else " and speed")
    return verdict(PASSED, reason + ("; " + notes if notes else ""), detail)


# What the inventory's fabric profile (validate_fabric_expect) may hold; exclude_hcas is applied by rdma_facts.
FABRIC_PROFILE_KEYS = ("expect_hcas", "expect_ports", "min_active_ports", "expect_state", "min_rate_gbps",
                       "link_layer", "gpudirect", "exclude_hcas")
# The profile's gpudirect: the method the node must use, or any of the two; "" / none expects nothing.
GPUDIRECT_EXPECTED = ("dmabuf", "peermem", "any")
PORT_STATES = ("ACTIVE", "INIT", "ARMED", "DOWN")
LINK_LAYERS = ("InfiniBand", "Ethernet")


def fabric_ports(hcas):
    """One row per port of the HCAs rdma_facts read: name, hca, port, pci_address, firmware, state, phys_state, rate,
    rate_gbps, link_layer, gid_index (the RoCE v2 IPv4 GID index, RoCE ports only, else None) and netdev (the
    port's GID netdev, else the HCA's netdevs)."""
    rows = []
    for hca in hcas:
        for port in hca.get("ports") or []:
            roce = port.get("link_layer") == "Ethernet"
            rows.append({
                "name": port.get("name") or "%s:%s" % (hca.get("name"), port.get("port")),
                "hca": hca.get("name"),
                "port": port.get("port"),
                "pci_address": hca.get("pci_address"),
                "firmware": hca.get("fw_ver"),
                "state": port.get("state"),
                "phys_state": port.get("phys_state"),
                "rate": port.get("rate"),
                "rate_gbps": port.get("rate_gbps"),
                "link_layer": port.get("link_layer"),
                "gid_index": port.get("roce_v2_ipv4_gid_index") if roce else None,
                "netdev": port.get("netdev") or (", ".join(hca.get("netdevs") or []) or None),
            })
    return rows


def gpudirect_state(gpudirect):
    """What the registered ``gpufleet.cluster.gpudirect_facts`` result says of GPUDirect RDMA on the node:
    {method, usable, reason, peermem_loaded, kernel, kernel_modules, ofed}.

    ``method`` is dmabuf, peermem or none (None when the module did not run). DMA-BUF is usable when chosen
    (kernel and open modules allow it); nvidia-peermem only once the module is loaded. A failed module (an
    explicit interconnect_gpudirect the node cannot honour, nvidia-peermem not installed) is not usable, with
    the module's message as the reason.
    """
    if is_skipped(gpudirect):
        return {"method": None, "usable": False, "reason": "gpudirect_facts did not run", "peermem_loaded": None,
                "kernel": None, "kernel_modules": None, "ofed": None}
    error = module_error(gpudirect)
    facts = (gpudirect.get("ansible_facts") or {}).get("gpufleet_gpudirect") or gpudirect.get(
        "gpufleet_gpudirect") or {}
    method = facts.get("method") or "none"
    reason = error or one_line(facts.get("reason")) or "no reason given"
    usable = not error and (method == "dmabuf" or (method == "peermem" and bool(facts.get("peermem_loaded"))))
    if not error and method == "peermem" and not usable:
        reason += " nvidia-peermem is not loaded (the interconnect role loads it)."
    return {"method": method, "usable": usable, "reason": reason, "peermem_loaded": facts.get("peermem_loaded"),
            "kernel": facts.get("kernel"), "kernel_modules": facts.get("kernel_modules"), "ofed": facts.get("ofed")}


def fabric_profile(expect):
    """The set entries of the fabric profile (None and "" are unset), and one line per entry it cannot read."""
    profile, problems = {}, []
    for key, value in sorted((expect or {}).items()):
        if key not in FABRIC_PROFILE_KEYS:
            problems.append("unknown fabric profile key %s (known: %s)" % (key, ", ".join(FABRIC_PROFILE_KEYS)))
            continue
        if value is None or value == "" or value == [] or key == "exclude_hcas":
            continue
        if key in ("expect_hcas", "expect_ports", "min_active_ports", "min_rate_gbps"):
            try:
                number = float(value)
            except (TypeError, ValueError):
                problems.append("fabric profile %s must be a number, not %r" % (key, value))
                continue
            profile[key] = number if key == "min_rate_gbps" else int(number)
            continue
        allowed = {"expect_state": PORT_STATES, "link_layer": LINK_LAYERS,
                   "gpudirect": GPUDIRECT_EXPECTED + ("none",)}[key]
        if value not in allowed:
            problems.append("fabric profile %s must be one of %s, not %r" % (key, ", ".join(allowed), value))
            continue
        if not (key == "gpudirect" and value == "none"):
            profile[key] = value
    return profile, problems


def _port_problem(row, wanted, found):
    return "%s (%s): expected %s; found %s" % (row["name"], row["pci_address"] or "no PCI address",
                                               ", ".join(wanted), ", ".join(found))


def _names(rows, with_state=False):
    if not rows:
        return "none under /sys/class/infiniband"
    return ", ".join(("%s %s" % (r["name"], r["state"])) if with_state else r["name"] for r in rows)


def fabric_problems(hcas, gpudirect, profile):
    """One line per miss of the profile (``fabric_profile``'s first value) by the HCAs rdma_facts read and the
    ``gpudirect_state``; empty when every expectation holds. Each port line names the port, its PCI address,
    what was expected and what it shows. expect_hcas is exact, expect_ports and min_active_ports are floors;
    with any profile a RoCE port without a RoCE v2 IPv4 GID is a miss (NCCL_IB_GID_INDEX has nothing to name)."""
    rows = fabric_ports(hcas)
    problems = []
    if "expect_hcas" in profile and len(hcas) != profile["expect_hcas"]:
        problems.append("expected %d RDMA HCA(s), found %d (%s)" % (
            profile["expect_hcas"], len(hcas),
            ", ".join(h.get("name") or "?" for h in hcas) or "none under /sys/class/infiniband"))
    if "expect_ports" in profile and len(rows) < profile["expect_ports"]:
        problems.append("expected at least %d RDMA port(s), found %d (%s)" % (
            profile["expect_ports"], len(rows), _names(rows)))
    active = [r for r in rows if r["state"] == "ACTIVE"]
    if "min_active_ports" in profile and len(active) < profile["min_active_ports"]:
        problems.append("expected at least %d ACTIVE port(s), found %d (%s)" % (
            profile["min_active_ports"], len(active), _names(rows, with_state=True)))
    port_keys = [k for k in ("expect_state", "min_rate_gbps", "link_layer") if k in profile]
    if port_keys and not rows and not set(profile) & {"expect_hcas", "expect_ports", "min_active_ports"}:
        problems.append("expected RDMA ports with %s, found none under /sys/class/infiniband" % ", ".join(port_keys))
    for row in rows:
        wanted, found = [], []
        if "expect_state" in profile and row["state"] != profile["expect_state"]:
            wanted.append("state %s" % profile["expect_state"])
            found.append("state %s (phys %s)" % (row["state"], row["phys_state"]))
        rate = row["rate_gbps"]
        if "min_rate_gbps" in profile and (rate is None or rate < profile["min_rate_gbps"]):
            wanted.append("rate >= %g Gb/s" % profile["min_rate_gbps"])
            found.append("rate %s" % (row["rate"] or "unknown"))
        if "link_layer" in profile and row["link_layer"] != profile["link_layer"]:
            wanted.append("link layer %s" % profile["link_layer"])
            found.append("link layer %s" % row["link_layer"])
        if profile and row["link_layer"] == "Ethernet" and row["gid_index"] is None:
            wanted.append("a RoCE v2 GID with an IPv4 address (NCCL_IB_GID_INDEX)")
            found.append("none in the GID table (netdev %s has no IPv4 address?)" % (row["netdev"] or "unknown"))
        if wanted:
            problems.append(_port_problem(row, wanted, found))
    expected = profile.get("gpudirect")
    if expected:
        method = gpudirect["method"] or "unknown"
        if not gpudirect["usable"] or (expected != "any" and method != expected):
            problems.append("GPUDirect RDMA: expected %s; found %s%s: %s" % (
                "dmabuf or peermem" if expected == "any" else expected, method,
                "" if gpudirect["usable"] else " (not usable)", gpudirect["reason"]))
    return problems


def _fabric_summary(hcas, rows, gpudirect):
    if not rows:
        found = ("no InfiniBand/RoCE port on %s" % ", ".join(h.get("name") or "?" for h in hcas)) if hcas \
            else "no InfiniBand/RoCE HCA"
    else:
        def counted(values):
            seen = []
            for value in values:
                if value not in seen:
                    seen.append(value)
            return ", ".join("%s %d" % (v, values.count(v)) if len(seen) > 1 else str(v) for v in seen)
        found = "%d port(s) on %d HCA(s): %s; %s; %s" % (
            len(rows), len(hcas), counted([r["state"] for r in rows]),
            counted(["%g Gb/s" % r["rate_gbps"] if r["rate_gbps"] is not None else "rate unknown" for r in rows]),
            counted([r["link_layer"] for r in rows]))
        no_gid = [r["name"] for r in rows if r["link_layer"] == "Ethernet" and r["gid_index"] is None]
        if no_gid:
            found += "; no RoCE v2 IPv4 GID on %s" % ", ".join(no_gid)
    if gpudirect["method"] is None:
        return found + "; GPUDirect RDMA not read (%s)" % gpudirect["reason"]
    return found + "; GPUDirect RDMA %s (%s): %s" % (
        gpudirect["method"], "usable" if gpudirect["usable"] else "not usable", gpudirect["reason"])


def fabric_verdict(fabric, gpudirect=None, expect=None):
    """Verdict of the ``fabric`` step from the registered ``gpufleet.cluster.rdma_facts`` result (read without
    expectations), the registered ``gpufleet.cluster.gpudirect_facts`` result and the fabric profile
    (``validate_fabric_expect``: expect_hcas, expect_ports, min_active_ports, expect_state, min_rate_gbps,
    link_layer, gpudirect, exclude_hcas).

    failed: one line per miss of the profile (``fabric_problems``), an unreadable profile, or the module's
    error; skipped: no profile, with what was found (nothing was checked), or rdma_facts did not run; passed:
    the profile holds. ``detail``: ib_ports (HCA names), ports (``fabric_ports`` rows), gpudirect
    (``gpudirect_state``), profile (the set entries), problems.
    """
    ran = not is_skipped(fabric)
    fabric = fabric or {}
    rdma = (fabric.get("ansible_facts") or {}).get("gpufleet_rdma") or {}
    hcas = rdma.get("hcas") or []
    rows = fabric_ports(hcas)
    state = gpudirect_state(gpudirect)
    profile, profile_problems = fabric_profile(expect)
    detail = {"ib_ports": [hca.get("name") for hca in hcas], "ports": rows, "excluded": rdma.get("excluded") or [],
              "gpudirect": state, "profile": profile, "problems": []}
    if not ran:
        return verdict(SKIPPED, "rdma_facts did not run", detail)
    error = module_error(fabric)
    if error:
        return verdict(FAILED, error, detail)
    detail["problems"] = profile_problems + fabric_problems(hcas, state, profile)
    if detail["problems"]:
        return verdict(FAILED, "; ".join(detail["problems"]), detail)
    summary = _fabric_summary(hcas, rows, state)
    if not profile:
        return verdict(SKIPPED, "no fabric profile (gpufleet_fabric_expect), nothing checked; found " + summary,
                       detail)
    return verdict(PASSED, "profile met (%s); found %s" % (
        ", ".join("%s=%s" % (k, v) for k, v in sorted(profile.items())), summary), detail)


def image_record(slurped):
    """The node's image record (``image_security_record_path``) from its registered ``slurp`` result, or None
    when the file is missing or unreadable."""
    if is_skipped(slurped) or slurped.get("failed") or not slurped.get("content"):
        return None
    try:
        record = json.loads(base64.b64decode(slurped["content"]).decode("utf-8"))
    except (ValueError, TypeError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _scan_detail(record, digest):
    """What the node's record says of the scan gate for ``digest``: {status, reason}."""
    if record is None:
        return {"status": SKIPPED, "reason": "no image record on the node (image_security has not run here since "
                "it records the scan gate)"}
    scan = record.get("scan") or {}
    status, reason = scan.get("status"), one_line(str(scan.get("reason") or ""))
    if status == PASSED and scan.get("digest") == digest:
        return {"status": PASSED, "reason": reason or "trivy passed the policy"}
    if status == SKIPPED:
        return {"status": SKIPPED, "reason": reason or "scan gate off (no reason recorded)"}
    return {"status": SKIPPED, "reason": "no scan of %s recorded on the node" % digest}


def image_verdict(signed, image="", key_configured=False, record=None):
    """Verdict of the ``image`` step from the registered ``gpufleet.cluster.signed_image`` result (check mode).

    ``image`` is the configured reference (empty: no image), ``key_configured`` whether a cosign key is set,
    ``record`` the registered ``slurp`` of the node's image record (what image_security distributed and whether
    its scan gate passed or was skipped, with the reason).
    skipped: no image or no key; failed: the verification's message, a verified digest missing on the node, a
    result that is not a verification against the registry in this run, or a digest other than the one
    image_security recorded; passed: the signature verified now and the digest is on the node. ``detail`` carries
    digest, key_fingerprint, verified_by, pinned (repository@digest) and scan ({status, reason} of the scan gate,
    from the record), None where the module did not get that far.
    """
    ran = not is_skipped(signed)
    signed = signed or {}
    verified = signed.get("verified") or {}
    node = image_record(record)
    detail = {
        "digest": signed.get("digest"),
        "key_fingerprint": verified.get("key_fingerprint"),
        "verified_by": verified.get("by"),
        "pinned": signed.get("image_pinned"),
        "scan": None,
    }
    if not image:
        return verdict(SKIPPED, "no training image configured (gpufleet_image)", detail)
    if not key_configured:
        return verdict(SKIPPED, "no cosign key configured", detail)
    if not ran:
        return verdict(SKIPPED, "signature check did not run (%s)" % (signed.get("skip_reason") or "skipped"),
                       detail)
    error = module_error(signed)
    if error:
        return verdict(FAILED, error, detail)
    digest = signed.get("digest")
    detail["scan"] = _scan_detail(node, digest)
    if detail["verified_by"] not in ("key", "keyless") or _int(verified.get("signatures")) < 1 or not digest:
        return verdict(FAILED, "%s: the signature was not verified against the registry in this run (verified by "
                       "%s)" % (digest or image, detail["verified_by"] or "nothing"), detail)
    if signed.get("changed"):
        return verdict(FAILED, "signature verified but %s is not on the node" % digest, detail)
    if node is not None and node.get("digest") and node.get("digest") != digest:
        return verdict(FAILED, "signature of %s verified, but image_security distributed %s to this node: run "
                       "image_security again" % (digest, node.get("digest")), detail)
    by = (" with key %s" % detail["key_fingerprint"]) if detail["key_fingerprint"] else (
        " (%s)" % detail["verified_by"])
    return verdict(PASSED, "signature verified%s, %s present; scan gate %s: %s"
                   % (by, digest, detail["scan"]["status"], detail["scan"]["reason"]), detail)


def dcgm_diag_results(stdout):
    """Read dcgmi diag's result table: ``(results, failing)``.

    ``results`` maps each test name to its result cells in order (the test's own row, then one per entity:
    ``Fail - GPU: 0`` in DCGM 3, ``GPU0: Fail`` in DCGM 4); ``failing`` lists, in order, the tests with a Fail
    or Error result. Message rows (``Warning``, ``Info``, their wrapped lines) and metadata are left out.
    """
    results, failing, test = {}, [], None
    for line in (stdout or "").splitlines():
        row = DIAG_ROW.match(line.strip())
        if not row:
            continue
        name, cell = row.group(1), row.group(2)
        if name:
            test = None if DIAG_MESSAGE.match(name) else name
        match = DIAG_RESULT.match(cell)
        if test is None or not match:
            continue
        results.setdefault(test, []).append(cell)
        if match.group(1) in DIAG_FAILING and test not in failing:
            failing.append(test)
    return results, failing


def dcgm_diag_verdict(diag, enabled=True, gpu_count=0, dcgmi_installed=False):
    """Verdict of the ``dcgm_diag`` step from the registered ``dcgmi diag -r 1`` command result.

    skipped: check off, no NVIDIA GPU, or DCGM not installed; failed: the tests with a Fail or Error result,
    else (dcgmi itself errored) its last meaningful line; passed: rc 0 and no failing test.
    """
    if is_skipped(diag):
        if not enabled:
            reason = "check off"
        elif _int(gpu_count) == 0:
            reason = "no NVIDIA GPU"
        elif not dcgmi_installed:
            reason = "DCGM not installed"
        else:
            reason = "dcgmi diag did not run (%s)" % ((diag or {}).get("skip_reason") or "skipped")
        return verdict(SKIPPED, reason)
    rc = diag.get("rc")
    results, failing = dcgm_diag_results(diag.get("stdout"))
    detail = {"rc": rc, "tests": results, "failed_tests": failing}
    if failing:
        return verdict(FAILED, "dcgmi diag -r 1 failed: %s" % ", ".join(failing), detail)
    if rc != 0:
        return verdict(FAILED, last_line(diag, "dcgmi failed (rc=%s)" % rc), detail)
    return verdict(PASSED, "dcgmi diag -r 1 passed", detail)


def sshd_audit_verdict(remote, local=None, enabled=True):
    """Verdict of the ``sshd_audit`` step from the registered ssh-audit command results.

    ``remote`` is the run from the controller, ``local`` the run on the node (used when the controller's is
    skipped). skipped: check off, or ssh-audit on neither side; failed: its [fail]/[warn] lines, else (it
    errored, e.g. could not connect) its last meaningful line; passed: rc 0.
    """
    where = "node" if is_skipped(remote) else "controller"
    run = local if where == "node" else remote
    if is_skipped(run):
        return verdict(SKIPPED, "check off" if not enabled
                       else "ssh-audit is installed neither on the controller nor on the node")
    rc = run.get("rc")
    findings = [line.strip() for line in _lines(run, "stdout") if SSH_AUDIT_FINDING.search(line)]
    detail = {"from": where, "rc": rc, "findings": findings}
    if rc == 0:
        return verdict(PASSED, "ssh-audit: no failure, no warning", detail)
    if findings:
        return verdict(FAILED, "; ".join(findings), detail)
    return verdict(FAILED, last_line(run, "ssh-audit failed (rc=%s)" % rc), detail)


def _node_exporter(result):
    """(ok, text) for the uri probe of node_exporter's /metrics."""
    status = _int(result.get("status"), 0)
    if status == 200 and "node_cpu_seconds_total" in str(result.get("content") or ""):
        return True, "node_exporter up"
    if status == 200:
        return False, "node_exporter answered without node metrics (no node_cpu_seconds_total)"
    return False, "node_exporter not answering (%s)" % (one_line(result.get("msg")) or "HTTP %d" % status)


def _dcgm_exporter(result):
    """(ok, text) for systemd's view of dcgm-exporter.service; skipped (no GPU) is fine."""
    if is_skipped(result):
        return True, "dcgm-exporter skipped: no NVIDIA GPU"
    unit = result.get("status") or {}
    state = unit.get("ActiveState")
    if state == "active":
        return True, "dcgm-exporter active"
    if unit.get("LoadState") == "not-found" or (not state and "msg" not in result):
        return False, "dcgm-exporter not installed"
    if not state:
        return False, "dcgm-exporter state unknown (%s)" % module_error(result)
    return False, "dcgm-exporter %s" % state


def exporters_verdict(node_exporter, dcgm_exporter=None):
    """Verdict of the ``exporters`` step from the registered uri probe of node_exporter and the registered
    ``systemd_service`` result of dcgm-exporter (skipped on a node without GPU).

    passed when node_exporter serves node metrics and dcgm-exporter is active or skipped; failed otherwise.
    """
    if is_skipped(node_exporter):
        return verdict(SKIPPED, "node_exporter probe did not run")
    node = node_exporter
    node_ok, node_text = _node_exporter(node)
    dcgm_ok, dcgm_text = _dcgm_exporter(dcgm_exporter)
    detail = {
        "node_exporter": {"url": node.get("url"), "status": node.get("status")},
        "dcgm_exporter": None if is_skipped(dcgm_exporter)
        else (dcgm_exporter.get("status") or {}).get("ActiveState"),
    }
    return verdict(PASSED if node_ok and dcgm_ok else FAILED, "%s, %s" % (node_text, dcgm_text), detail)
