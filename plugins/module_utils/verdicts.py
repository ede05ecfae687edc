# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure verdicts of the validate role's steps. No Ansible import here.

Each ``<step>_verdict`` function takes the results the role's tasks register, as Ansible registers them (a
command's ``rc``/``stdout``/``stderr``/``stdout_lines``, ``skipped``, a module's ``msg``, uri's ``status`` and
``content``, ...), and returns ``{"status": "passed"|"failed"|"skipped", "reason": str, "detail": dict}``, the
shape ``roles/validate/tasks/record.yml`` appends to the node's report.

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


def fabric_verdict(fabric):
    """Verdict of the ``fabric`` step from the registered ``gpufleet.cluster.rdma_facts`` result.

    failed: the module's message (the expectations it found missed); skipped: no InfiniBand/RoCE port;
    passed: the number of ports and their states. ``detail.ib_ports`` names the HCAs, ``detail.ports`` holds
    every port as rdma_facts reads it.
    """
    ran = not is_skipped(fabric)
    fabric = fabric or {}
    hcas = ((fabric.get("ansible_facts") or {}).get("gpufleet_rdma") or {}).get("hcas") or []
    ports = [port for hca in hcas for port in (hca.get("ports") or [])]
    detail = {"ib_ports": [hca.get("name") for hca in hcas], "ports": ports}
    if not ran:
        return verdict(SKIPPED, "rdma_facts did not run", detail)
    error = module_error(fabric)
    if error:
        return verdict(FAILED, error, detail)
    if not ports:
        if hcas:
            return verdict(SKIPPED, "no InfiniBand/RoCE port on %s" % ", ".join(detail["ib_ports"]), detail)
        return verdict(SKIPPED, "no InfiniBand/RoCE HCA", detail)
    states = []
    for port in ports:
        state = port.get("state")
        if state not in states:
            states.append(state)
    return verdict(PASSED, "%d port(s): %s" % (len(ports), ", ".join(str(s) for s in states)), detail)


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
