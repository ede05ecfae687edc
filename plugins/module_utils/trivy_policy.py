# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure policy evaluation of Trivy JSON reports (``trivy image --format json``, SchemaVersion 2).

A policy is a maximum count per severity and an allowlist of vulnerability ids, each with the reason it is
accepted and the date it expires. An expired entry stops hiding its vulnerability and the result names it.
No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

SEVERITIES = ("CRITICAL", "HIGH", "MEDIUM", "LOW", "UNKNOWN")


class PolicyError(ValueError):
    """Raised for a report or a policy that cannot be evaluated."""


def load_report(text):
    """Parse a Trivy JSON report; only the SchemaVersion 2 shape (an object with ``Results``) is accepted."""
    try:
        report = json.loads(text)
    except ValueError as exc:
        raise PolicyError("the Trivy report is not JSON: %s" % exc)
    if isinstance(report, list):
        raise PolicyError("this Trivy report is the pre-0.20 list format; gpufleet reads SchemaVersion 2 reports "
                          "(trivy 0.20 or later)")
    if not isinstance(report, dict) or report.get("SchemaVersion") != 2:
        raise PolicyError("unsupported Trivy report: SchemaVersion %r, expected 2"
                          % (report.get("SchemaVersion") if isinstance(report, dict) else None))
    return report


def findings(report):
    """Flatten ``Results[].Vulnerabilities[]`` into dicts (one per vulnerability and package)."""
    out, seen = [], set()
    for result in report.get("Results") or []:
        for vuln in result.get("Vulnerabilities") or []:
            item = {
                "id": vuln.get("VulnerabilityID", ""),
                "package": vuln.get("PkgName", ""),
                "installed": vuln.get("InstalledVersion", ""),
                "fixed": vuln.get("FixedVersion") or "",
                "severity": (vuln.get("Severity") or "UNKNOWN").upper(),
                "target": result.get("Target", ""),
                "title": vuln.get("Title", ""),
            }
            key = (item["id"], item["package"], item["installed"], item["target"])
            if key not in seen:
                seen.add(key)
                out.append(item)
    return out


def _as_date(value, where):
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.datetime.strptime(str(value), "%Y-%m-%d").date()
    except ValueError:
        raise PolicyError("%s: expires must be a date YYYY-MM-DD, got %r" % (where, value))


def normalize_allowlist(entries):
    """Check allowlist entries (``id``, ``reason``, ``expires``) and return them with a date for expires."""
    out = []
    for index, entry in enumerate(entries or []):
        where = "allowlist entry %d" % (index + 1)
        if not isinstance(entry, dict):
            raise PolicyError("%s must be a mapping with id, reason and expires" % where)
        missing = [k for k in ("id", "reason", "expires") if not entry.get(k)]
        if missing:
            raise PolicyError("%s (%s) lacks %s: every accepted vulnerability needs a reason and an expiry date"
                              % (where, entry.get("id", "?"), ", ".join(missing)))
        out.append({"id": str(entry["id"]).strip(), "reason": str(entry["reason"]),
                    "expires": _as_date(entry["expires"], "%s (%s)" % (where, entry["id"]))})
    return out


def normalize_max_counts(max_counts):
    out = {}
    for severity, limit in (max_counts or {}).items():
        sev = str(severity).upper()
        if sev not in SEVERITIES:
            raise PolicyError("max_counts: unknown severity %r (use %s)" % (severity, ", ".join(SEVERITIES)))
        try:
            limit = int(limit)
        except (TypeError, ValueError):
            raise PolicyError("max_counts.%s must be a whole number, got %r" % (sev, limit))
        if limit < 0:
            raise PolicyError("max_counts.%s must be 0 or more, got %d" % (sev, limit))
        out[sev] = limit
    return out


def evaluate(report, max_counts, allowlist=None, today=None, severities=None, ignore_unfixed=False):
    """Apply the policy to a loaded report.

    Returns a dict: ``passed``, ``counts`` (per severity, after the allowlist), ``counts_total`` (before),
    ``violations`` (severity, count, limit), ``offending`` (the counted findings of the violated severities),
    ``allowlisted`` (findings hidden by a live entry, with its reason), ``expired_allowlist`` (entries whose date
    has passed; their findings count again) and ``unused_allowlist`` (live entries matching nothing).
    """
    today = today or datetime.date.today()
    limits = normalize_max_counts(max_counts)
    entries = normalize_allowlist(allowlist)
    wanted = set(s.upper() for s in severities) if severities else set(SEVERITIES)

    live = dict((e["id"], e) for e in entries if e["expires"] >= today)
    expired = [dict(e, expires=e["expires"].isoformat()) for e in entries if e["expires"] < today]

    counts_total = dict((s, 0) for s in SEVERITIES)
    counts = dict((s, 0) for s in SEVERITIES)
    counted, allowlisted, used = [], [], set()
    for item in findings(report):
        if item["severity"] not in wanted or (ignore_unfixed and not item["fixed"]):
            continue
        counts_total[item["severity"]] += 1
        entry = live.get(item["id"])
        if entry:
            used.add(item["id"])
            allowlisted.append(dict(item, reason=entry["reason"], expires=entry["expires"].isoformat()))
            continue
        counts[item["severity"]] += 1
        counted.append(item)

    violations = [{"severity": s, "count": counts[s], "limit": limits[s]}
                  for s in SEVERITIES if s in limits and counts[s] > limits[s]]
    bad = set(v["severity"] for v in violations)
    return {
        "passed": not violations,
        "counts": counts,
        "counts_total": counts_total,
        "violations": violations,
        "offending": [i for i in counted if i["severity"] in bad],
        "allowlisted": allowlisted,
        "expired_allowlist": expired,
        "unused_allowlist": sorted(set(live) - used),
    }


def summary(artifact, result):
    """One readable message: verdict, violated limits, offending CVEs and expired allowlist entries."""
    if result["passed"]:
        text = "%s passes the scan policy (%s)" % (artifact, _counts_text(result["counts"]))
    else:
        limits = "; ".join("%s %d > %d allowed" % (v["severity"], v["count"], v["limit"])
                           for v in result["violations"])
        cves = "; ".join("%s %s %s (fixed: %s)" % (i["id"], i["package"], i["installed"], i["fixed"] or "none")
                         for i in result["offending"])
        text = "%s fails the scan policy: %s. Offending: %s" % (artifact, limits, cves)
    if result["expired_allowlist"]:
        text += ". Expired allowlist entries no longer count: %s" % ", ".join(
            "%s (expired %s)" % (e["id"], e["expires"]) for e in result["expired_allowlist"])
    return text


def _counts_text(counts):
    return ", ".join("%s %d" % (s, counts[s]) for s in SEVERITIES if counts.get(s))  or "no vulnerabilities"
