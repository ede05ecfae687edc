"""Attacks on the signature binding and on re-verification: a tag re-pointed to another image signed by the same
key, an image already on the node checked with a rotated key, and the digest resolved once per run.

The cosign payloads are the recorded Debian cosign 2.5.0 output (tests/fixtures/cosign) with the annotation
``cosign sign -a tag=<tag>`` adds under ``optional``."""
import copy
import json
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import cosign as cs
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import verdicts as vd
from conftest import FIXTURES
from module_harness import Fail
from test_signed_image_module import BASE, DIGEST, FAILURES, PINNED, REPO, VERIFY_OK, cmds, host, run  # noqa: F401 host is a fixture; pylint: disable=unused-import

RECORDED = json.loads(VERIFY_OK)


def payloads(*claims):
    """Recorded payloads, one per (docker-reference, tag annotation or None, digest)."""
    out = []
    for ref, tag, digest in claims:
        item = copy.deepcopy(RECORDED[0])
        item["critical"]["identity"]["docker-reference"] = ref
        item["critical"]["image"]["docker-manifest-digest"] = digest
        item["optional"] = {"tag": tag} if tag else None
        out.append(item)
    return json.dumps(out)


def test_tag_repointed_to_an_image_signed_for_another_tag_is_refused_and_nothing_pulled(host):
    host.cosign = (0, payloads((REPO, "v2.6", DIGEST)), "")
    result = run(dict(BASE, tag_as="pytorch-cuda:current"), expect=Fail)
    assert result["reason"] == "reference_mismatch"
    assert "tag=v2.6" in result["msg"] and "asked for %s:v2.7" % REPO in result["msg"]
    assert "Nothing was pulled" in result["msg"]
    assert not [c for c in cmds(host, "docker") if "pull" in c or "tag" in c] and host.store == {}


def test_image_signed_for_another_repository_is_refused(host):
    host.cosign = (0, payloads(("registry.gpufleet.test:5000/gpufleet/other", "v2.7", DIGEST)), "")
    result = run(BASE, expect=Fail)
    assert result["reason"] == "reference_mismatch" and "gpufleet/other tag=v2.7" in result["msg"]
    assert host.store == {}


def test_unannotated_signature_binds_to_the_repository_only_unless_the_annotation_is_required(host):
    host.cosign = (0, payloads((REPO, None, DIGEST)), "")
    assert run(BASE)["digest"] == DIGEST
    refused = run(dict(BASE, require_tag_annotation=True), expect=Fail)
    assert refused["reason"] == "reference_mismatch" and "with the annotation tag=v2.7" in refused["msg"]


def test_one_payload_for_the_asked_tag_is_enough_when_the_digest_was_promoted(host):
    host.cosign = (0, payloads((REPO, "v2.6", DIGEST), (REPO, "v2.7", DIGEST)), "")
    result = run(dict(BASE, require_tag_annotation=True))
    assert result["verified"]["tags"] == ["v2.6", "v2.7"] and result["verified"]["bound_to"] == REPO + ":v2.7"


def test_digest_of_the_run_is_verified_by_digest_and_the_tag_is_not_resolved_again(host):
    host.cosign = (0, payloads((REPO, "v2.7", DIGEST)), "")
    result = run(dict(BASE, digest=DIGEST, require_tag_annotation=True))
    assert result["image_pinned"] == PINNED and result["pulled"]
    assert [c[-1] for c in cmds(host, "cosign")] == [PINNED]
    assert [c[-1] for c in cmds(host, "docker") if "pull" in c] == [PINNED]


def test_a_node_whose_registry_answers_another_digest_fails(host):
    other = "sha256:" + "e" * 64
    host.cosign = (0, payloads((REPO, "v2.7", other)), "")
    result = run(dict(BASE, digest=DIGEST), expect=Fail)
    assert result["reason"] == "digest_mismatch" and host.store == {}


def test_state_verified_resolves_once_without_an_engine(host):
    host.cosign = (0, payloads((REPO, "v2.7", DIGEST)), "")
    result = run(dict(BASE, state="verified"))
    assert (result["digest"], result["image_pinned"], result["changed"]) == (DIGEST, PINNED, False)
    assert cmds(host, "docker") == [] and [c[-1] for c in cmds(host, "cosign")] == [REPO + ":v2.7"]


def test_image_on_the_node_with_a_revoked_key_fails_every_run(host):
    host.store[PINNED] = "sha256:imageid1"
    case = FAILURES["signed with another key"]
    host.cosign = (case["rc"], "", case["stderr"])
    for args in (dict(BASE, digest=DIGEST), dict(BASE, image=PINNED), dict(BASE, _ansible_check_mode=True)):
        result = run(args, expect=Fail)
        assert result["reason"] == "no_matching_signature"
    assert len(cmds(host, "cosign")) == 3 and host.store == {PINNED: "sha256:imageid1"}


def test_the_digest_option_must_agree_with_the_reference(host):
    result = run(dict(BASE, image=PINNED, digest="sha256:" + "e" * 64), expect=Fail)
    assert "carries another digest" in result["msg"] and host.calls == []


@pytest.mark.parametrize("name,want", [
    ("registry.gpufleet.test:5000/gpufleet/pytorch-cuda", "registry.gpufleet.test:5000/gpufleet/pytorch-cuda"),
    ("Registry.Example:5000/ml/x", "registry.example:5000/ml/x"),
    ("index.docker.io/library/alpine", "docker.io/library/alpine"),
    ("alpine", "docker.io/library/alpine"),
    ("docker.io/ml/x", "docker.io/ml/x"),
])
def test_repository_names_compare_as_go_containerregistry_writes_them(name, want):
    assert cs.normalize_repository(name) == want


def test_docker_hub_reference_binds_to_cosigns_index_name():
    verified = cs.parse_verify_output(payloads(("index.docker.io/library/alpine", "3.20", DIGEST)))
    assert cs.check_binding(verified, cs.parse_image_ref("alpine:3.20"), True) == (True, "")
    assert not cs.check_binding(verified, cs.parse_image_ref("alpine:3.19"), True)[0]


# validate's image step: passes only on a verification against the registry in this run.

def registered(by="key", signatures=1, changed=False):
    return {"changed": changed, "failed": False, "digest": DIGEST, "image_pinned": PINNED,
            "verified": {"by": by, "key_fingerprint": "SHA256:" + "a" * 64, "signatures": signatures}}


def slurped(record):
    import base64
    return {"changed": False, "content": base64.b64encode(json.dumps(record).encode()).decode(), "encoding": "base64"}


RECORD_OFF = {"digest": DIGEST, "pinned": PINNED,
              "scan": {"status": "skipped", "reason": "scan gate off: no trivy in the lab", "digest": ""}}
RECORD_SCANNED = {"digest": DIGEST, "pinned": PINNED,
                  "scan": {"status": "passed", "reason": "%s passes the scan policy (no vulnerabilities)" % PINNED,
                           "digest": DIGEST}}


@pytest.mark.parametrize("result,record,status,words", [
    (registered(by="local-digest"), RECORD_OFF, "failed", "not verified against the registry in this run"),
    (registered(signatures=0), RECORD_OFF, "failed", "not verified against the registry in this run"),
    (registered(), RECORD_OFF, "passed", "scan gate skipped: scan gate off: no trivy in the lab"),
    (registered(), RECORD_SCANNED, "passed", "scan gate passed: %s passes the scan policy" % PINNED),
    (registered(), dict(RECORD_SCANNED, digest="sha256:" + "e" * 64), "failed", "run image_security again"),
    (registered(), None, "passed", "scan gate skipped: no image record on the node"),
])
def test_validate_image_step(result, record, status, words):
    got = vd.image_verdict(result, REPO + ":v2.7", True, slurped(record) if record else {"failed": True})
    assert got["status"] == status and words in got["reason"], got


def test_validate_reports_a_skipped_gate_as_skipped_with_its_reason():
    got = vd.image_verdict(registered(), REPO + ":v2.7", True, slurped(RECORD_OFF))
    assert got["detail"]["scan"] == {"status": "skipped", "reason": "scan gate off: no trivy in the lab"}
    scanned = vd.image_verdict(registered(), REPO + ":v2.7", True, slurped(RECORD_SCANNED))
    assert scanned["detail"]["scan"]["status"] == "passed"
    stale = vd.image_verdict(registered(), REPO + ":v2.7", True,
                             slurped(dict(RECORD_SCANNED, scan=dict(RECORD_SCANNED["scan"], digest="sha256:" + "f" * 64))))
    assert stale["detail"]["scan"] == {"status": "skipped", "reason": "no scan of %s recorded on the node" % DIGEST}


def test_fixture_source_is_named():
    with open(os.path.join(FIXTURES, "cosign", "README.md")) as handle:
        assert "verify_key_debian_2.5.0.json" in handle.read()
