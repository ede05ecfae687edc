"""cosign helpers on real cosign output (tests/fixtures/cosign, sources in its README)."""
import os

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.module_utils import cosign as cs
from conftest import FIXTURES

COSIGN = os.path.join(FIXTURES, "cosign")


def read(name):
    with open(os.path.join(COSIGN, name)) as handle:
        return handle.read()


@pytest.mark.parametrize("ref,expected", [
    ("registry.gpufleet.test:5000/gpufleet/pytorch-cuda:v2.7",
     {"name": "registry.gpufleet.test:5000/gpufleet/pytorch-cuda", "registry": "registry.gpufleet.test:5000",
      "path": "gpufleet/pytorch-cuda", "tag": "v2.7", "digest": None}),
    ("busybox", {"name": "busybox", "registry": "docker.io", "path": "busybox", "tag": None, "digest": None}),
    ("localhost:5000/a/b@sha256:" + "a" * 64,
     {"name": "localhost:5000/a/b", "registry": "localhost:5000", "path": "a/b", "tag": None,
      "digest": "sha256:" + "a" * 64}),
    ("ghcr.io/x/y:1.0@sha256:" + "b" * 64,
     {"name": "ghcr.io/x/y", "registry": "ghcr.io", "path": "x/y", "tag": "1.0", "digest": "sha256:" + "b" * 64}),
    ("pytorch-cuda:current", {"name": "pytorch-cuda", "registry": "docker.io", "path": "pytorch-cuda",
                              "tag": "current", "digest": None}),
])
def test_parse_image_ref(ref, expected):
    assert cs.parse_image_ref(ref) == expected


@pytest.mark.parametrize("ref", [
    "", " busybox", "Registry/UPPER:1", "gpufleet-image_security-registry:5000/x/y:1",
    "x/y@sha256:short", "x/y@md5:" + "a" * 32, "x/y:bad tag",
])
def test_parse_image_ref_rejects(ref):
    with pytest.raises(cs.ImageRefError):
        cs.parse_image_ref(ref)


def test_pinned_ref_uses_the_name_never_the_tag():
    parsed = cs.parse_image_ref("registry.example.com/ml/pytorch-cuda:v2.7")
    assert cs.pinned_ref(parsed, "sha256:" + "c" * 64) == "registry.example.com/ml/pytorch-cuda@sha256:" + "c" * 64


def test_parse_verify_output_key_signed_debian():
    result = cs.parse_verify_output(read("verify_key_debian_2.5.0.json"))
    assert result["digests"] == ["sha256:1deae06b5eb8a1a7ebe5f571894e328321f8eafd9891ce712ecc8cdf91fcef85"]
    assert result["docker_references"] == ["registry.gpufleet.test:5000/gpufleet/pytorch-cuda"]
    assert result["identities"] == []
    assert result["count"] == 1


def test_parse_verify_output_keyless_identity():
    result = cs.parse_verify_output(read("verify_keyless_chainguard_git.json"))
    assert result["digests"] == ["sha256:f0888cfe090e8923a66d65ddffc988a69a62a7fb08a1a24e9dfabc6ef74a3293"]
    assert result["identities"] == [{
        "subject": "https://github.com/chainguard-images/git/.github/workflows/release.yaml@refs/heads/main",
        "issuer": "https://token.actions.githubusercontent.com"}]


def test_parse_verify_output_skips_the_text_cosign_prints_first():
    text = "Verification for x --\nThe following checks were performed\n" + read("verify_key_debian_2.5.0.json")
    assert cs.parse_verify_output(text)["count"] == 1


@pytest.mark.parametrize("stdout", ["", "[]", '[{"critical": {"image": {}}}]',
                                    '[{"critical": {"image": {"docker-manifest-digest": "sha256:xyz"}}}]'])
def test_parse_verify_output_rejects(stdout):
    with pytest.raises(ValueError):
        cs.parse_verify_output(stdout)


CASES = yaml.safe_load(read("verify_failures.yml"))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_classify_failure_on_captured_stderr(case):
    reason, detail = cs.classify_failure(case["rc"], case["stderr"])
    assert reason == case["reason"]
    assert detail.startswith("error during command execution")


@pytest.mark.parametrize("rc,reason", [(10, "no_signature"), (11, "tag_not_found"),
                                       (12, "no_matching_signature"), (1, "unknown")])
def test_classify_failure_by_exit_code_when_stderr_says_nothing_known(rc, reason):
    assert cs.classify_failure(rc, "Error: something new\n")[0] == reason


def test_failure_message_is_readable():
    msg = cs.failure_message("r/x:1", "no_matching_signature", "error during command execution: no matching")
    assert "wrong key" in msg and "Nothing was pulled" in msg and msg.startswith("r/x:1")


def test_key_fingerprint_is_sha256_of_der():
    pem = read("fleet.pub")
    fingerprint = cs.key_fingerprint(pem)
    assert fingerprint.startswith("SHA256:") and len(fingerprint) == 7 + 64
    assert cs.key_fingerprint("not a key") is None


def test_docker_config_carries_basic_auth():
    import base64
    import json
    doc = json.loads(cs.docker_config("registry.example.com", "fleet", "s3cret"))
    assert base64.b64decode(doc["auths"]["registry.example.com"]["auth"]) == b"fleet:s3cret"
    assert "https://index.docker.io/v1/" in json.loads(cs.docker_config("docker.io", "a", "b"))["auths"]
