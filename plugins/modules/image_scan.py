#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_scan
short_description: Scan a container image with Trivy and gate it on a vulnerability policy
version_added: "0.1.0"
description:
  - Runs C(trivy image --format json --image-src remote) on O(image), by digest, straight from the registry (or
    reads a report Trivy wrote earlier, O(from_report)), and applies a policy; a maximum count per severity
    (O(max_counts)) and an allowlist of vulnerability ids, each with a reason, an expiry date at most
    O(allowlist_max_days) ahead and optionally the package it is accepted in (O(allowlist)).
  - Fails when the report is not of the digest that was asked for (Trivy's C(ArtifactName) and
    C(Metadata.RepoDigests)), and when the vulnerability DB the scan used (C(trivy version --format json),
    C(VulnerabilityDB.UpdatedAt)) is older than O(db_max_age_hours).
  - An allowlist entry whose date has passed stops hiding its vulnerability, and the result lists it under
    RV(expired_allowlist).
  - Fails when the policy is violated, listing each offending vulnerability (id, package, installed and fixed
    version). Optionally writes the JSON report to O(report_dest).
options:
  image:
    description:
      - Image to scan, by digest (C(registry.example.com/ml/pytorch-cuda@sha256:...)); a tag is refused unless
        O(require_digest=false).
    type: str
  require_digest:
    description: Refuse an O(image) that is not pinned by digest (a tag can move between the scan and the pull).
    type: bool
    default: true
  image_src:
    description:
      - Where Trivy takes the image from (C(--image-src)); V(remote) is the registry itself, never a copy in a local
        daemon that may differ.
    type: list
    elements: str
    default: [remote]
  db_max_age_hours:
    description:
      - Refuse the scan when the vulnerability DB was built more than this many hours ago (its C(UpdatedAt));
        C(0) turns the check off. Not checked with O(from_report) (RV(db) is then null).
    type: int
    default: 72
  allowlist_max_days:
    description: Refuse an allowlist entry that expires more than this many days after today.
    type: int
    default: 90
  from_report:
    description:
      - Path of a Trivy JSON report (SchemaVersion 2) to evaluate instead of running Trivy, e.g. one produced by
        the CI job that built the image. Then no Trivy is needed where the gate runs.
    type: path
  max_counts:
    description:
      - Maximum number of vulnerabilities per severity (C(CRITICAL), C(HIGH), C(MEDIUM), C(LOW), C(UNKNOWN)),
        counted after the allowlist. A severity not named here is not limited.
    type: dict
    default: {CRITICAL: 0}
  allowlist:
    description: Accepted vulnerabilities.
    type: list
    elements: dict
    default: []
    suboptions:
      id: {description: Vulnerability id as Trivy prints it (C(CVE-2024-1234)), type: str, required: true}
      package: {description: "Only this package's finding is accepted (Trivy's C(PkgName)); empty: any package", type: str}
      reason: {description: "Why it is accepted (who decided, what mitigates it)", type: str, required: true}
      expires: {description: Date (YYYY-MM-DD) after which the entry no longer hides the vulnerability, type: str, required: true}
  severities:
    description: Severities Trivy reports (C(--severity)); the policy only sees these.
    type: list
    elements: str
    default: [CRITICAL, HIGH, MEDIUM, LOW, UNKNOWN]
  ignore_unfixed:
    description: Leave out vulnerabilities that have no fixed version yet (C(--ignore-unfixed)).
    type: bool
    default: false
  cache_dir:
    description: Trivy cache directory (C(--cache-dir)), where its vulnerability DB lives.
    type: path
  skip_db_update:
    description: Use the DB already in O(cache_dir) (C(--skip-db-update)), for air-gapped sites with a pre-seeded DB.
    type: bool
    default: false
  db_repository:
    description: OCI repository of the vulnerability DB, e.g. a mirror (C(--db-repository)).
    type: str
  timeout:
    description: Trivy's own time limit (C(--timeout)), e.g. C(10m).
    type: str
    default: 10m
  registry_username:
    description: User for the image registry (given to Trivy as C(TRIVY_USERNAME)).
    type: str
  registry_password:
    description: Password for O(registry_username) (C(TRIVY_PASSWORD)).
    type: str
  insecure_registry:
    description: Allow plain HTTP / unchecked TLS to the registry (C(TRIVY_INSECURE)).
    type: bool
    default: false
  report_dest:
    description: Where to write the JSON report (on the host the module runs on).
    type: path
  trivy_path:
    description: The trivy binary; looked up on PATH when not given.
    type: path
  today:
    description: Date the allowlist expiry is compared with; defaults to today.
    type: str
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; the scan and the policy run, only O(report_dest) is not written.
  - O(report_dest) is written through a C(mkstemp) file in its own directory (created mode 0700 when missing),
    then moved into place.
  - Only SchemaVersion 2 reports (Trivy 0.20 and later) are read.
"""

EXAMPLES = r"""
- name: Gate the training image on CVEs
  gpufleet.cluster.image_scan:
    image: registry.example.com/ml/pytorch-cuda@sha256:5c99d8ed73711e9c33aeb592029fcb427c0595c0aa07edfd8165dbfb9a3b1206
    max_counts: {CRITICAL: 0, HIGH: 10}
    db_max_age_hours: 72
    ignore_unfixed: true
    allowlist:
      - id: CVE-2023-45853
        package: zlib1g
        reason: zlib minizip is not used by the training code (SEC-142)
        expires: "2025-12-31"
    report_dest: /srv/reports/pytorch-cuda-v2.7.trivy.json
  delegate_to: localhost
  run_once: true

- name: Evaluate the report the CI job produced
  gpufleet.cluster.image_scan:
    from_report: /srv/ci/pytorch-cuda-v2.7.trivy.json
    max_counts: {CRITICAL: 0}
"""

RETURN = r"""
passed:
  description: Whether the image meets the policy (always true when the module returns without failing).
  returned: always
  type: bool
counts:
  description: Vulnerabilities per severity that count (after the allowlist).
  returned: always
  type: dict
  sample: {CRITICAL: 0, HIGH: 2, MEDIUM: 0, LOW: 0, UNKNOWN: 0}
counts_total:
  description: Vulnerabilities per severity before the allowlist.
  returned: always
  type: dict
violations:
  description: Severities over their limit, with count and limit.
  returned: always
  type: list
offending:
  description: The counted vulnerabilities of the violated severities (id, package, installed, fixed, severity, target, title).
  returned: always
  type: list
allowlisted:
  description: Vulnerabilities hidden by a live allowlist entry, with its reason and expiry.
  returned: always
  type: list
expired_allowlist:
  description: Allowlist entries past their date; their vulnerabilities count again.
  returned: always
  type: list
unused_allowlist:
  description: Live allowlist ids that matched nothing in this report (candidates to remove).
  returned: always
  type: list
artifact:
  description: What was scanned (Trivy's ArtifactName).
  returned: always
  type: str
db:
  description:
    - The vulnerability DB the scan used (trivy_version, updated_at, next_update, downloaded_at, age_hours); null
      with O(from_report).
  returned: always
  type: dict
scanned_digest:
  description: The digest that was scanned (from O(image)); null with O(from_report).
  returned: always
  type: str
report_dest:
  description: Where the report was written.
  returned: when report_dest is set
  type: str
"""

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils.atomic_file import write_beside
from ansible_collections.gpufleet.cluster.plugins.module_utils import trivy_policy as tp


def trivy_command(trivy, p):
    cmd = [trivy, "image", "--format", "json", "--quiet", "--scanners", "vuln",
           "--image-src", ",".join(p["image_src"]),
           "--severity", ",".join(s.upper() for s in p["severities"]), "--timeout", p["timeout"]]
    if p["ignore_unfixed"]:
        cmd.append("--ignore-unfixed")
    if p["cache_dir"]:
        cmd += ["--cache-dir", p["cache_dir"]]
    if p["skip_db_update"]:
        cmd.append("--skip-db-update")
    if p["db_repository"]:
        cmd += ["--db-repository", p["db_repository"]]
    return cmd + [p["image"]]


def version_command(trivy, p):
    cmd = [trivy, "version", "--format", "json"]
    if p["cache_dir"]:
        cmd += ["--cache-dir", p["cache_dir"]]
    return cmd


def write_report(module, dest, content):
    """Write ``content`` to ``dest`` through a mkstemp file beside it (never a predictable name); a directory this
    makes is 0700, which keeps the report private."""
    directory = os.path.dirname(dest) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    write_beside(module, dest, content)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str"),
            require_digest=dict(type="bool", default=True),
            image_src=dict(type="list", elements="str", default=["remote"]),
            db_max_age_hours=dict(type="int", default=tp.DEFAULT_DB_MAX_AGE_HOURS),
            allowlist_max_days=dict(type="int", default=tp.DEFAULT_ALLOWLIST_MAX_DAYS),
            from_report=dict(type="path"),
            max_counts=dict(type="dict", default={"CRITICAL": 0}),
            allowlist=dict(type="list", elements="dict", default=[], options=dict(
                id=dict(type="str", required=True),
                package=dict(type="str"),
                reason=dict(type="str", required=True),
                expires=dict(type="str", required=True),
            )),
            severities=dict(type="list", elements="str", default=list(tp.SEVERITIES)),
            ignore_unfixed=dict(type="bool", default=False),
            cache_dir=dict(type="path"),
            skip_db_update=dict(type="bool", default=False),
            db_repository=dict(type="str"),
            timeout=dict(type="str", default="10m"),
            registry_username=dict(type="str"),
            registry_password=dict(type="str", no_log=True),
            insecure_registry=dict(type="bool", default=False),
            report_dest=dict(type="path"),
            trivy_path=dict(type="path"),
            today=dict(type="str"),
        ),
        required_one_of=[("image", "from_report")],
        mutually_exclusive=[("image", "from_report")],
        required_together=[("registry_username", "registry_password")],
        supports_check_mode=True,
    )
    p = module.params
    bad = [s for s in p["severities"] if s.upper() not in tp.SEVERITIES]
    if bad:
        module.fail_json(msg="severities: unknown %s (use %s)" % (", ".join(bad), ", ".join(tp.SEVERITIES)))
    try:
        today = datetime.datetime.strptime(p["today"], "%Y-%m-%d").date() if p["today"] else None
        # Check the policy before spending minutes on a scan.
        tp.normalize_max_counts(p["max_counts"])
        tp.normalize_allowlist(p["allowlist"], today=today, max_days=p["allowlist_max_days"])
    except (ValueError, tp.PolicyError) as exc:
        module.fail_json(msg="invalid scan policy: %s. Nothing was scanned." % exc)
    digest = None
    if p["image"]:
        digest = p["image"].split("@", 1)[1] if "@" in p["image"] else None
        if p["require_digest"] and not (digest and digest.startswith("sha256:") and len(digest) == 71):
            module.fail_json(msg="image %s is not pinned by digest (repository@sha256:...): a tag can point at another "
                             "image by the time it is pulled. Scan the digest that was verified, or set "
                             "require_digest: false. Nothing was scanned." % p["image"])

    if p["from_report"]:
        try:
            with open(p["from_report"], "r") as handle:
                text = handle.read()
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot read the Trivy report %s: %s" % (p["from_report"], exc))
    else:
        trivy = p["trivy_path"] or module.get_bin_path("trivy")
        if not trivy:
            module.fail_json(msg="trivy is not installed here; install it (image_security_trivy_install) or "
                             "evaluate a report made elsewhere with from_report")
        env = {"LANGUAGE": "C", "LC_ALL": "C"}
        if p["registry_username"]:
            env.update(TRIVY_USERNAME=p["registry_username"], TRIVY_PASSWORD=p["registry_password"])
        if p["insecure_registry"]:
            env["TRIVY_INSECURE"] = "true"
        rc, text, err = module.run_command(trivy_command(trivy, p), environ_update=env)
        if rc != 0:
            module.fail_json(msg="trivy could not scan %s: %s" % (p["image"], (err or "").strip()[-2000:]),
                             rc=rc)
        # The DB the scan just used (trivy updates it first unless skip_db_update).
        vrc, vout, verr = module.run_command(version_command(trivy, p), environ_update=env)
        if vrc != 0:
            module.fail_json(msg="trivy version could not report its vulnerability DB: %s; the scan of %s is not "
                             "trusted" % ((verr or "").strip()[-1000:], p["image"]), rc=vrc)
    db = None
    try:
        report = tp.load_report(text)
        if not p["from_report"]:
            db = tp.db_status(vout, p["db_max_age_hours"])
            if digest:
                tp.check_scanned(report, p["image"], digest)
        result = tp.evaluate(report, p["max_counts"], p["allowlist"], today=today,
                             severities=p["severities"], ignore_unfixed=p["ignore_unfixed"],
                             max_days=p["allowlist_max_days"])
    except tp.PolicyError as exc:
        module.fail_json(msg="%s. The scan gate did not pass." % str(exc).rstrip("."), db=db)
    artifact = report.get("ArtifactName") or p["image"] or p["from_report"]
    result.update(artifact=artifact, db=db, scanned_digest=digest)

    changed = False
    if p["report_dest"]:
        result["report_dest"] = p["report_dest"]
        content = json.dumps(report, indent=2, sort_keys=True) + "\n"
        old = None
        if os.path.exists(p["report_dest"]):
            with open(p["report_dest"], "r") as handle:
                old = handle.read()
        if old != content:
            changed = True
            if not module.check_mode:
                write_report(module, p["report_dest"], content)

    message = tp.summary(artifact, result)
    if not result["passed"]:
        module.fail_json(msg=message, changed=changed, **result)
    module.exit_json(changed=changed, msg=message, **result)


if __name__ == "__main__":
    main()
