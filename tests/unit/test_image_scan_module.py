"""image_scan on real Trivy reports, with trivy itself behind a mocked run_command."""
import datetime
import json
import os

import pytest
from ansible.module_utils import basic

from ansible_collections.gpufleet.cluster.plugins.modules import image_scan
from conftest import FIXTURES
from module_harness import Exit, Fail, patch_module, run_main

TRIVY = os.path.join(FIXTURES, "trivy")
CRITICAL_REPORT = os.path.join(TRIVY, "alpine-39-high-critical.json")
PINNED = "registry.example.com/ml/pytorch-cuda@sha256:" + "5c" * 32
# The shape of `trivy version --format json` (Version, VulnerabilityDB{Version, NextUpdate, UpdatedAt,
# DownloadedAt}); UpdatedAt is an hour ago so the DB is fresh.
FRESH_DB = json.dumps({"Version": "0.58.1", "VulnerabilityDB": {
    "Version": 2,
    "UpdatedAt": (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)).isoformat(),
    "NextUpdate": (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=5)).isoformat(),
    "DownloadedAt": datetime.datetime.now(datetime.timezone.utc).isoformat()}})


@pytest.fixture
def calls(monkeypatch):
    recorded = []

    def run_command(module, cmd, environ_update=None, **kwargs):
        recorded.append((list(cmd), dict(environ_update or {})))
        if cmd[1] == "version":
            return 0, FRESH_DB, ""
        with open(os.path.join(TRIVY, "alpine-3.12.json")) as handle:
            report = json.load(handle)
        # What trivy reports for a remote scan by digest: the target as given, and its digest.
        report["ArtifactName"] = cmd[-1]
        report["Metadata"]["RepoDigests"] = [cmd[-1]]
        return 0, json.dumps(report), ""

    patch_module(monkeypatch, run_command)
    return recorded


def run(args, expect=Exit):
    return run_main(image_scan.main, args, expect)


def test_trivy_flags_and_credentials(calls):
    result = run({"image": PINNED, "max_counts": {"HIGH": 5},
                  "ignore_unfixed": True, "cache_dir": "/var/cache/trivy", "skip_db_update": True,
                  "db_repository": "mirror.example.com/aquasecurity/trivy-db:2", "severities": ["HIGH", "CRITICAL"],
                  "registry_username": "fleet", "registry_password": "s3cret", "today": "2025-06-01"})
    assert result["passed"] and result["counts"]["HIGH"] == 2
    cmd, env = calls[0]
    assert cmd[:4] == ["/usr/bin/trivy", "image", "--format", "json"]
    for flag in ("--ignore-unfixed", "--skip-db-update", "--cache-dir", "--db-repository", "--timeout"):
        assert flag in cmd
    assert cmd[cmd.index("--severity") + 1] == "HIGH,CRITICAL"
    assert cmd[-1] == PINNED and cmd[cmd.index("--image-src") + 1] == "remote"
    assert env["TRIVY_PASSWORD"] == "s3cret" and "s3cret" not in cmd
    version, _unused = calls[1]
    assert version == ["/usr/bin/trivy", "version", "--format", "json", "--cache-dir", "/var/cache/trivy"]
    assert result["scanned_digest"] == PINNED.split("@")[1] and result["db"]["age_hours"] < 2


def test_from_report_fails_listing_offending_cves(calls):
    result = run({"from_report": CRITICAL_REPORT, "today": "2025-06-01"}, expect=Fail)
    assert not result["passed"] and calls == []
    assert "CVE-2019-14697 musl 1.1.20-r4 (fixed: 1.1.20-r5)" in result["msg"]
    assert [o["package"] for o in result["offending"]] == ["musl", "musl-utils"]


def test_expired_allowlist_is_said(calls):
    allow = [{"id": "CVE-2019-14697", "reason": "no i386", "expires": "2025-01-01"}]
    result = run({"from_report": CRITICAL_REPORT, "allowlist": allow, "today": "2025-06-01"}, expect=Fail)
    assert "Expired allowlist entries no longer count: CVE-2019-14697" in result["msg"]
    live = run({"from_report": CRITICAL_REPORT, "allowlist": [dict(allow[0], expires="2025-08-01")],
                "today": "2025-06-01"})
    assert live["passed"] and len(live["allowlisted"]) == 2


def test_report_dest_written_once(calls, tmp_path):
    dest = str(tmp_path / "reports" / "img.trivy.json")
    args = {"from_report": os.path.join(TRIVY, "alpine-3.12.json"), "max_counts": {}, "report_dest": dest}
    first = run(args)
    assert first["changed"] and json.load(open(dest))["ArtifactName"] == "alpine:3.12"
    assert not run(args)["changed"]


def test_check_mode_does_not_write(calls, tmp_path):
    dest = str(tmp_path / "img.json")
    result = run({"from_report": os.path.join(TRIVY, "alpine-3.12.json"), "max_counts": {}, "report_dest": dest,
                  "_ansible_check_mode": True})
    assert result["changed"] and not os.path.exists(dest)


@pytest.mark.parametrize("args,words", [
    ({"from_report": CRITICAL_REPORT, "allowlist": [{"id": "CVE-1", "reason": "r", "expires": "soon"}]},
     "YYYY-MM-DD"),
    ({"from_report": CRITICAL_REPORT, "max_counts": {"SEVERE": 0}}, "unknown severity"),
    ({"from_report": CRITICAL_REPORT, "severities": ["HIGH", "BAD"]}, "severities: unknown BAD"),
])
def test_bad_policy_fails_before_scanning(calls, args, words):
    assert words in run(args, expect=Fail)["msg"]
    assert calls == []


def test_missing_trivy_says_what_to_do(calls, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda module, name, required=False, opt_dirs=None: None)
    result = run({"image": PINNED}, expect=Fail)
    assert "trivy is not installed" in result["msg"] and "from_report" in result["msg"]
