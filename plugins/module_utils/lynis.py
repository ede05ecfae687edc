# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Lynis audits: the profile that leaves a container's impossible tests unscored, and the report's figures.

Pure functions, shared by the lynis_audit module and the unit tests.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.module_utils.sysctl import normalize, read_live

# Tests a container cannot pass whatever the role does: what they look at belongs to the host or the engine.
# On a real host they stay scored.
CONTAINER_UNSCORED = (
    ("KRNL-5788", "no kernel image in a container: the host's kernel is booted by the host"),
    ("FILE-6310", "separate partitions: a container's filesystems are the container engine's"),
    ("ACCT-9622", "process accounting: the acct() call belongs to the host kernel (acct is installed on a real host)"),
    ("ACCT-9628", "auditd: the kernel audit belongs to the host (auditd and the gpufleet rules go on a real host)"),
    ("ACCT-9630", "audit rules: the kernel audit belongs to the host"),
    ("ACCT-9632", "audit daemon configuration: the kernel audit belongs to the host"),
    ("ACCT-9634", "audit log: the kernel audit belongs to the host"),
    ("MACF-6290", "AppArmor/SELinux: the mandatory access control framework is the host kernel's"),
)

SYSCTL_REASON = ("written to %s with the value the scan profile expects and applied on a real host; "
                 "in a container /proc/sys is the host kernel's")


def profile_sysctl_expectations(profile_text):
    """{key: set of accepted values} from the scan profile's `config-data=sysctl;key;value;...` lines."""
    expected = {}
    for line in profile_text.splitlines():
        line = line.strip()
        if not line.startswith("config-data=sysctl;"):
            continue
        fields = line[len("config-data="):].split(";")
        if len(fields) < 3 or not fields[1]:
            continue
        expected[fields[1]] = set(v.strip() for v in fields[2].split("|"))
    return expected


def sysctl_file_values(text):
    """{key: value} from a sysctl.d file (comments and blank lines skipped, `-key` tolerated)."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip().lstrip("-").replace("/", ".")
        values[key] = normalize(value)
    return values


def unscored_tests(container, expectations, written, written_path, live):
    """[(test, reason)] the audit leaves unscored: none on a real host.

    In a container: the fixed CONTAINER_UNSCORED tests, and KRNL-6000 for each key the node's file sets to a
    value the profile accepts while the live value (`live`: key to value, None where unreadable), which is the
    host kernel's, differs. A key whose live value already matches stays scored, and so does a key the file sets
    to another value (a documented exception such as net.ipv4.conf.all.forwarding).
    """
    if not container:
        return []
    skipped = list(CONTAINER_UNSCORED)
    for key in sorted(written):
        accepted = expectations.get(key)
        if accepted and written[key] in accepted and live.get(key) not in accepted:
            skipped.append(("KRNL-6000:" + key, SYSCTL_REASON % written_path))
    return skipped


def live_sysctl_values(keys, proc_root="/proc/sys"):
    """{key: live value or None} read from /proc/sys."""
    return dict((key, read_live(proc_root, key)) for key in keys)


def profile_text(skipped):
    """A lynis profile that includes nothing but the skip lines (lynis reads default.prf first)."""
    lines = ["# Written by gpufleet.cluster.lynis_audit for one audit run; default.prf is read first."]
    for test, reason in skipped:
        lines.append("# %s" % reason)
        lines.append("skip-test=%s" % test)
    return "\n".join(lines) + "\n"


def parse_report(text):
    """The figures of a lynis report (report.dat): index, tests, warnings, suggestions, version.

    The lists are named lynis_warnings and lynis_suggestions: `warnings` is a name Ansible keeps for itself.
    """
    result = {"hardening_index": None, "tests_performed": None, "lynis_version": None,
              "lynis_warnings": [], "lynis_suggestions": []}
    for line in text.splitlines():
        if "=" not in line or line.startswith("#"):
            continue
        key, value = line.split("=", 1)
        if key == "hardening_index":
            result["hardening_index"] = int(value) if value.strip().isdigit() else None
        elif key == "lynis_tests_done":
            result["tests_performed"] = int(value) if value.strip().isdigit() else None
        elif key == "lynis_version":
            result["lynis_version"] = value.strip()
        elif key in ("warning[]", "suggestion[]"):
            fields = value.split("|")
            entry = {"test": fields[0], "text": fields[1] if len(fields) > 1 else "",
                     "details": fields[2] if len(fields) > 2 and fields[2] not in ("-", "") else ""}
            result["lynis_warnings" if key == "warning[]" else "lynis_suggestions"].append(entry)
    return result
