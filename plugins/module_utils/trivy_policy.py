# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure policy evaluation of Trivy JSON reports (``trivy image --format json``, SchemaVersion 2).

A policy is a maximum count per severity and an allowlist of vulnerability ids, each with the reason it is
accepted, the date it expires (at most ``max_days`` ahead) and optionally the one package it is accepted in. An
expired entry stops hiding its vulnerability and the result names it. The vulnerability DB the scan used must be
younger than a set age (``trivy version --format json``), and the report must be of the digest that was asked
for. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import re

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


DEFAULT_ALLOWLIST_MAX_DAYS = 90
DEFAULT_DB_MAX_AGE_HOURS = 72


def normalize_allowlist(entries, today=None, max_days=None):
    """Check allowlist entries (``id``, optional ``package``, ``reason``, ``expires``) and return them with a
    date for expires. With ``max_days``, an entry that expires more than that many days after ``today`` is
    refused: an acceptance is reviewed at least that often."""
    today = today or datetime.date.today()
    latest = today + datetime.timedelta(days=int(max_days)) if max_days else None
    out = []
    for index, entry in enumerate(entries or []):
        where = "allowlist entry %d" % (index + 1)
        if not isinstance(entry, dict):
            raise PolicyError("%s must be a mapping with id, reason and expires (and optionally package)" % where)
        unknown = sorted(set(entry) - set(("id", "package", "reason", "expires")))
        if unknown:
            raise PolicyError("%s (%s): unknown key(s) %s; an entry has id, package, reason and expires"
                              % (where, entry.get("id", "?"), ", ".join(unknown)))
        missing = [k for k in ("id", "reason", "expires") if not entry.get(k)]
        if missing:
            raise PolicyError("%s (%s) lacks %s: every accepted vulnerability needs a reason and an expiry date"
                              % (where, entry.get("id", "?"), ", ".join(missing)))
        expires = _as_date(entry["expires"], "%s (%s)" % (where, entry["id"]))
        if latest and expires > latest:
            raise PolicyError("%s (%s) expires %s, more than %d days from today (%s): set expires to %s or "
                              "earlier and review the acceptance then"
                              % (where, entry["id"], expires.isoformat(), int(max_days), today.isoformat(),
                                 latest.isoformat()))
        package = entry.get("package")
        out.append({"id": str(entry["id"]).strip(), "reason": str(entry["reason"]), "expires": expires,
                    "package": str(package).strip() if package else None})
    return out


def _entry_matches(entry, item):
    return entry["id"] == item["id"] and (entry["package"] is None or entry["package"] == item["package"])


def _parse_time(value):
    """An RFC 3339 time as Trivy prints it (nanoseconds, ``Z`` or an offset) as an aware datetime, or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("z", "Z")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?([+-]\d\d:\d\d)$", text)
    if not match:
        return None
    fraction = (match.group(2) or ".0")[:7]
    offset = match.group(3)
    try:
        stamp = datetime.datetime.strptime(match.group(1) + fraction, "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return None
    sign = 1 if offset[0] == "+" else -1
    delta = datetime.timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
    return (stamp - sign * delta).replace(tzinfo=_UTC)


_UTC = datetime.timezone.utc


def db_status(version_text, max_age_hours=DEFAULT_DB_MAX_AGE_HOURS, now=None):
    """Read ``trivy version --format json`` and judge its vulnerability DB.

    Returns ``{"trivy_version", "updated_at", "next_update", "downloaded_at", "age_hours"}``; raises PolicyError
    when there is no DB, its UpdatedAt cannot be read, or it is older than ``max_age_hours`` (0: no limit).
    """
    now = now or datetime.datetime.now(_UTC)
    try:
        info = json.loads(version_text or "")
    except ValueError as exc:
        raise PolicyError("trivy version --format json printed no JSON (%s): the DB age cannot be checked" % exc)
    if not isinstance(info, dict):
        raise PolicyError("trivy version --format json printed %r, not an object" % (info,))
    db = info.get("VulnerabilityDB")
    if not isinstance(db, dict):
        raise PolicyError("trivy %s has no vulnerability DB in its cache directory (trivy version shows no "
                          "VulnerabilityDB): download it, or point cache_dir at a seeded one"
                          % info.get("Version", "?"))
    updated = _parse_time(db.get("UpdatedAt"))
    if updated is None:
        raise PolicyError("the trivy vulnerability DB has no readable UpdatedAt (%r)" % (db.get("UpdatedAt"),))
    age = (now - updated).total_seconds() / 3600.0
    status = {"trivy_version": info.get("Version"), "updated_at": db.get("UpdatedAt"),
              "next_update": db.get("NextUpdate"), "downloaded_at": db.get("DownloadedAt"),
              "age_hours": round(age, 1)}
    if max_age_hours and age > float(max_age_hours):
        raise PolicyError("the trivy vulnerability DB was built %s, %.0f hours ago, older than the %s hours allowed "
                          "(db_max_age_hours): update it (or the mirror / seeded cache it comes from) and scan again"
                          % (db.get("UpdatedAt"), age, max_age_hours))
    return status


def check_scanned(report, image, digest):
    """The report must be of ``image`` (Trivy's ArtifactName) and, where Trivy lists RepoDigests, of ``digest``.
    Raises PolicyError otherwise."""
    artifact = report.get("ArtifactName")
    if artifact != image:
        raise PolicyError("trivy reported on %r, not on %s that was asked for" % (artifact, image))
    digests = ((report.get("Metadata") or {}).get("RepoDigests")) or []
    if digests and not any(str(d).endswith("@" + digest) for d in digests):
        raise PolicyError("trivy scanned %s, not the digest %s that was asked for" % (", ".join(digests), digest))


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


def evaluate(report, max_counts, allowlist=None, today=None, severities=None, ignore_unfixed=False,
             max_days=None):
    """Apply the policy to a loaded report.

    Returns a dict: ``passed``, ``counts`` (per severity, after the allowlist), ``counts_total`` (before),
    ``violations`` (severity, count, limit), ``offending`` (the counted findings of the violated severities),
    ``allowlisted`` (findings hidden by a live entry, with its reason), ``expired_allowlist`` (entries whose date
    has passed; their findings count again) and ``unused_allowlist`` (live entries matching nothing).
    """
    today = today or datetime.date.today()
    limits = normalize_max_counts(max_counts)
    entries = normalize_allowlist(allowlist, today=today, max_days=max_days)
    wanted = set(s.upper() for s in severities) if severities else set(SEVERITIES)

    live = [e for e in entries if e["expires"] >= today]
    expired = [dict(e, expires=e["expires"].isoformat()) for e in entries if e["expires"] < today]

    counts_total = dict((s, 0) for s in SEVERITIES)
    counts = dict((s, 0) for s in SEVERITIES)
    counted, allowlisted, used = [], [], set()
    for item in findings(report):
        if item["severity"] not in wanted or (ignore_unfixed and not item["fixed"]):
            continue
        counts_total[item["severity"]] += 1
        entry = next((e for e in live if _entry_matches(e, item)), None)
        if entry:
            used.add(id(entry))
            allowlisted.append(dict(item, reason=entry["reason"], expires=entry["expires"].isoformat(),
                                    allowlisted_package=entry["package"]))
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
        "unused_allowlist": sorted(set(e["id"] + ((" (%s)" % e["package"]) if e["package"] else "")
                                       for e in live if id(e) not in used)),
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
    return ", ".join("%s %d" % (s, counts[s]) for s in SEVERITIES if counts.get(s)) or "no vulnerabilities"
