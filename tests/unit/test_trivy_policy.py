"""Scan policy on real Trivy reports (tests/fixtures/trivy, sources in its README)."""
import datetime
import json
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import trivy_policy as tp
from conftest import FIXTURES

TODAY = datetime.date(2025, 6, 1)


def report(name):
    with open(os.path.join(FIXTURES, "trivy", name)) as handle:
        return tp.load_report(handle.read())


def test_findings_flatten_each_package():
    items = tp.findings(report("alpine-39-high-critical.json"))
    assert [(i["id"], i["package"], i["installed"], i["fixed"], i["severity"]) for i in items] == [
        ("CVE-2019-14697", "musl", "1.1.20-r4", "1.1.20-r5", "CRITICAL"),
        ("CVE-2019-14697", "musl-utils", "1.1.20-r4", "1.1.20-r5", "CRITICAL"),
    ]


def test_criticals_fail_the_default_policy_listing_the_packages():
    result = tp.evaluate(report("alpine-39-high-critical.json"), {"CRITICAL": 0}, today=TODAY)
    assert not result["passed"]
    assert result["violations"] == [{"severity": "CRITICAL", "count": 2, "limit": 0}]
    assert [i["package"] for i in result["offending"]] == ["musl", "musl-utils"]
    msg = tp.summary("alpine-39", result)
    assert "CRITICAL 2 > 0 allowed" in msg and "CVE-2019-14697 musl 1.1.20-r4 (fixed: 1.1.20-r5)" in msg


def test_highs_within_limit_pass():
    result = tp.evaluate(report("alpine-3.12.json"), {"CRITICAL": 0, "HIGH": 2}, today=TODAY)
    assert result["passed"]
    assert result["counts"]["HIGH"] == 2
    assert "passes" in tp.summary("alpine:3.12", result)


def test_highs_over_limit_fail():
    result = tp.evaluate(report("alpine-3.12.json"), {"HIGH": 1}, today=TODAY)
    assert not result["passed"]
    assert [i["package"] for i in result["offending"]] == ["busybox", "ssl_client"]


def test_live_allowlist_entry_hides_with_its_reason():
    allow = [{"id": "CVE-2019-14697", "reason": "no i386 nodes", "expires": "2025-12-31"}]
    result = tp.evaluate(report("alpine-39-high-critical.json"), {"CRITICAL": 0}, allow, today=TODAY)
    assert result["passed"]
    assert result["counts"]["CRITICAL"] == 0 and result["counts_total"]["CRITICAL"] == 2
    assert {a["reason"] for a in result["allowlisted"]} == {"no i386 nodes"}
    assert result["expired_allowlist"] == []


def test_expired_allowlist_entry_counts_again_and_is_named():
    allow = [{"id": "CVE-2019-14697", "reason": "no i386 nodes", "expires": "2025-01-31"}]
    result = tp.evaluate(report("alpine-39-high-critical.json"), {"CRITICAL": 0}, allow, today=TODAY)
    assert not result["passed"]
    assert result["expired_allowlist"] == [{"id": "CVE-2019-14697", "reason": "no i386 nodes",
                                            "expires": "2025-01-31", "package": None}]
    assert "Expired allowlist entries no longer count: CVE-2019-14697 (expired 2025-01-31)" in \
        tp.summary("alpine-39", result)


def test_entry_expiring_today_still_holds():
    allow = [{"id": "CVE-2019-14697", "reason": "r", "expires": TODAY.isoformat()}]
    assert tp.evaluate(report("alpine-39-high-critical.json"), {"CRITICAL": 0}, allow, today=TODAY)["passed"]


def test_unused_allowlist_entries_are_reported():
    allow = [{"id": "CVE-2000-0001", "reason": "r", "expires": "2030-01-01"}]
    result = tp.evaluate(report("alpine-3.12.json"), {}, allow, today=TODAY)
    assert result["unused_allowlist"] == ["CVE-2000-0001"]


def test_severity_filter_and_ignore_unfixed():
    data = report("alpine-3.12.json")
    assert tp.evaluate(data, {"HIGH": 0}, today=TODAY, severities=["CRITICAL"])["passed"]
    data["Results"][0]["Vulnerabilities"][0]["FixedVersion"] = ""
    result = tp.evaluate(data, {"HIGH": 0}, today=TODAY, ignore_unfixed=True)
    assert result["counts"]["HIGH"] == 1


@pytest.mark.parametrize("allow,words", [
    ([{"id": "CVE-1", "reason": "r"}], "lacks expires"),
    ([{"id": "CVE-1", "expires": "2030-01-01"}], "lacks reason"),
    ([{"id": "CVE-1", "reason": "r", "expires": "31/12/2030"}], "YYYY-MM-DD"),
    (["CVE-1"], "must be a mapping"),
])
def test_bad_allowlist_is_refused(allow, words):
    with pytest.raises(tp.PolicyError, match=words):
        tp.evaluate(report("alpine-3.12.json"), {}, allow, today=TODAY)


@pytest.mark.parametrize("limits", [{"SEVERE": 1}, {"HIGH": -1}, {"HIGH": "many"}])
def test_bad_limits_are_refused(limits):
    with pytest.raises(tp.PolicyError):
        tp.evaluate(report("alpine-3.12.json"), limits, today=TODAY)


def test_old_list_format_and_other_schemas_are_refused():
    with pytest.raises(tp.PolicyError, match="pre-0.20"):
        tp.load_report(json.dumps([{"Target": "x", "Vulnerabilities": None}]))
    with pytest.raises(tp.PolicyError, match="SchemaVersion"):
        tp.load_report(json.dumps({"SchemaVersion": 3}))
    with pytest.raises(tp.PolicyError, match="not JSON"):
        tp.load_report("{")
