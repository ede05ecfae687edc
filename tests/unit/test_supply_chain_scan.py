"""The scan gate against a fake trivy executable run for real (no mocked run_command): it records its argv and
prints JSON in trivy's shapes, a SchemaVersion 2 report (tests/fixtures/trivy/alpine-3.12.json, with
ArtifactName and RepoDigests set to the target as trivy sets them for a remote scan by digest) and
``trivy version --format json`` (Version, VulnerabilityDB{Version, NextUpdate, UpdatedAt, DownloadedAt})."""
import datetime
import json
import os
import stat
import sys
import tempfile

import pytest
from ansible.module_utils import basic

from ansible_collections.gpufleet.cluster.plugins.module_utils import atomic_file
from ansible_collections.gpufleet.cluster.plugins.module_utils import trivy_policy as tp
from ansible_collections.gpufleet.cluster.plugins.modules import image_scan
from conftest import FIXTURES
from module_harness import Exit, Fail, run_main

DIGEST = "sha256:" + "5c" * 32
PINNED = "registry.example.com/ml/pytorch-cuda@" + DIGEST
REPORT = os.path.join(FIXTURES, "trivy", "alpine-3.12.json")
TODAY = datetime.date.today()

FAKE = r'''#!%(python)s
import json, os, sys
with open(os.environ["FAKE_TRIVY_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1:2] == ["version"]:
    if os.environ.get("FAKE_TRIVY_NO_DB"):
        print(json.dumps({"Version": "0.58.1"}))
    else:
        print(json.dumps({"Version": "0.58.1", "VulnerabilityDB": {
            "Version": 2, "UpdatedAt": os.environ["FAKE_TRIVY_DB_UPDATED"],
            "NextUpdate": os.environ["FAKE_TRIVY_DB_UPDATED"], "DownloadedAt": os.environ["FAKE_TRIVY_DB_UPDATED"]}}))
    sys.exit(0)
with open(os.environ["FAKE_TRIVY_REPORT"]) as handle:
    report = json.load(handle)
target = os.environ.get("FAKE_TRIVY_SCANNED", sys.argv[-1])
report["ArtifactName"] = sys.argv[-1]
report["Metadata"]["RepoDigests"] = [target]
print(json.dumps(report))
'''


def db_time(hours_ago):
    """UpdatedAt as trivy prints it: nanoseconds and Z."""
    stamp = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=hours_ago)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + "%09dZ" % (stamp.microsecond * 1000)


@pytest.fixture
def trivy(tmp_path, monkeypatch):
    """Path of the fake trivy; .calls() reads the argv lists it was run with."""
    path = tmp_path / "trivy"
    path.write_text(FAKE % {"python": sys.executable})
    path.chmod(stat.S_IRWXU)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_TRIVY_LOG", str(log))
    monkeypatch.setenv("FAKE_TRIVY_REPORT", REPORT)
    monkeypatch.setenv("FAKE_TRIVY_DB_UPDATED", db_time(5))

    def _raise(kind):
        def handler(module, **kwargs):
            raise kind(kwargs)
        return handler
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _raise(Exit))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _raise(Fail))

    class Trivy(str):
        def calls(self):
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Trivy(str(path))


def run(trivy, args, expect=Exit):
    # The allowlist dates count from TODAY as the test read it: a run across midnight sees no other day.
    return run_main(image_scan.main, dict({"image": PINNED, "trivy_path": trivy, "max_counts": {},
                                           "today": TODAY.isoformat()}, **args), expect)


def test_scans_exactly_the_digest_from_the_registry_and_checks_the_db(trivy):
    result = run(trivy, {"cache_dir": "/var/cache/trivy"})
    scan, version = trivy.calls()
    assert scan[0] == "image" and scan[-1] == PINNED and scan[scan.index("--image-src") + 1] == "remote"
    assert version == ["version", "--format", "json", "--cache-dir", "/var/cache/trivy"]
    assert result["scanned_digest"] == DIGEST and result["artifact"] == PINNED
    assert result["db"]["trivy_version"] == "0.58.1" and 4.9 < result["db"]["age_hours"] < 5.1


def test_a_tag_is_refused_before_trivy_runs(trivy):
    result = run(trivy, {"image": "registry.example.com/ml/pytorch-cuda:v2.7"}, expect=Fail)
    assert "not pinned by digest" in result["msg"] and "Nothing was scanned" in result["msg"]
    assert trivy.calls() == []


def test_a_report_of_another_digest_fails(trivy, monkeypatch):
    monkeypatch.setenv("FAKE_TRIVY_SCANNED", "registry.example.com/ml/pytorch-cuda@sha256:" + "e" * 64)
    result = run(trivy, {}, expect=Fail)
    assert "not the digest %s" % DIGEST in result["msg"] and "did not pass" in result["msg"]


def test_a_stale_db_is_refused(trivy, monkeypatch):
    monkeypatch.setenv("FAKE_TRIVY_DB_UPDATED", db_time(100))
    result = run(trivy, {"db_max_age_hours": 72}, expect=Fail)
    assert "older than the 72 hours allowed" in result["msg"]
    assert result["db"] is None
    assert run(trivy, {"db_max_age_hours": 0})["db"]["age_hours"] > 99


def test_no_db_is_refused(trivy, monkeypatch):
    monkeypatch.setenv("FAKE_TRIVY_NO_DB", "1")
    assert "has no vulnerability DB" in run(trivy, {}, expect=Fail)["msg"]


def test_allowlist_expiry_is_capped_before_trivy_runs(trivy):
    late = (TODAY + datetime.timedelta(days=91)).isoformat()
    result = run(trivy, {"allowlist": [{"id": "CVE-2021-36159", "reason": "r", "expires": late}]}, expect=Fail)
    latest = (TODAY + datetime.timedelta(days=90)).isoformat()
    assert "more than 90 days from today" in result["msg"] and "set expires to %s or earlier" % latest in result["msg"]
    assert "Nothing was scanned" in result["msg"] and trivy.calls() == []


def test_allowlist_entry_hides_only_its_package(trivy):
    report = tp.load_report(open(REPORT).read())
    item = tp.findings(report)[0]
    soon = (TODAY + datetime.timedelta(days=30)).isoformat()
    limit = {item["severity"]: 0}
    other = run(trivy, {"max_counts": limit, "allowlist": [
        {"id": item["id"], "package": item["package"] + "-other", "reason": "r", "expires": soon}]}, expect=Fail)
    assert item["id"] in other["msg"]
    same = run(trivy, {"max_counts": {}, "allowlist": [
        {"id": item["id"], "package": item["package"], "reason": "r", "expires": soon}]})
    assert [(a["id"], a["package"]) for a in same["allowlisted"]] == [
        (f["id"], f["package"]) for f in tp.findings(report) if f["id"] == item["id"] and f["package"] == item["package"]]


def test_report_goes_through_mkstemp_in_its_private_directory(trivy, tmp_path, monkeypatch):
    made = []
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        made.append(kwargs.get("dir"))
        return real(*args, **kwargs)
    monkeypatch.setattr(atomic_file.tempfile, "mkstemp", mkstemp)  # the helper image_scan writes through
    dest = tmp_path / "private" / "report.json"
    result = run(trivy, {"report_dest": str(dest)})
    assert result["changed"] and made == [str(dest.parent)]
    assert stat.S_IMODE(os.stat(str(dest.parent)).st_mode) == 0o700
    assert os.listdir(str(dest.parent)) == ["report.json"]
    assert json.load(open(str(dest)))["ArtifactName"] == PINNED


@pytest.mark.parametrize("text,words", [
    ("not json", "printed no JSON"),
    (json.dumps({"Version": "0.58.1", "VulnerabilityDB": {"UpdatedAt": "yesterday"}}), "no readable UpdatedAt"),
])
def test_unreadable_db_status_is_refused(text, words):
    with pytest.raises(tp.PolicyError) as info:
        tp.db_status(text)
    assert words in str(info.value)


def test_db_age_reads_offsets_and_nanoseconds():
    now = datetime.datetime(2025, 6, 1, 12, 0, tzinfo=datetime.timezone.utc)
    text = json.dumps({"VulnerabilityDB": {"UpdatedAt": "2025-06-01T08:00:00.123456789+02:00"}})
    assert tp.db_status(text, 72, now=now)["age_hours"] == 6.0
