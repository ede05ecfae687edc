"""signed_image with a recorded cosign and a fake engine behind a mocked run_command."""
import json
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.modules import signed_image
from conftest import FIXTURES
from module_harness import Exit, Fail, patch_module, run_main

COSIGN_DIR = os.path.join(FIXTURES, "cosign")
REPO = "registry.gpufleet.test:5000/gpufleet/pytorch-cuda"
DIGEST = "sha256:1deae06b5eb8a1a7ebe5f571894e328321f8eafd9891ce712ecc8cdf91fcef85"
PINNED = REPO + "@" + DIGEST
VERIFY_OK = open(os.path.join(COSIGN_DIR, "verify_key_debian_2.5.0.json")).read()
PEM = open(os.path.join(COSIGN_DIR, "fleet.pub")).read()
FAILURES = dict((c["name"], c) for c in __import__("yaml").safe_load(
    open(os.path.join(COSIGN_DIR, "verify_failures.yml"))))


class FakeHost(object):
    """An image store (ref -> image id) plus a scripted cosign answer; records every command."""

    def __init__(self, store=None, cosign=(0, VERIFY_OK, "")):
        self.store = dict(store or {})
        self.cosign = cosign
        self.calls = []

    def run_command(self, module, cmd, environ_update=None, check_rc=False, **kwargs):
        self.calls.append((list(cmd), dict(environ_update or {})))
        tool, args = os.path.basename(cmd[0]), cmd[1:]
        if tool == "cosign":
            return self.cosign
        if args[:2] == ["--config", args[1] if len(args) > 1 else None]:
            args = args[2:]
        if args[0] == "image" and args[1] == "inspect":
            ref = args[-1]
            if ref not in self.store:
                return 1, "", "Error: No such image: %s" % ref
            if ".RepoDigests" in args[3]:
                return 0, json.dumps([r for r in self.store if "@" in r and self.store[r] == self.store[ref]]), ""
            return 0, self.store[ref] + "\n", ""
        if args[0] == "pull":
            self.store[args[-1]] = "sha256:imageid1"
            return 0, "pulled", ""
        if args[0] == "tag":
            self.store[args[2]] = self.store[args[1]]
            return 0, "", ""
        if args[0] == "image" and args[1] == "rm":
            self.store.pop(args[2])
            return 0, "", ""
        raise AssertionError("unexpected command %r" % cmd)


@pytest.fixture
def host(monkeypatch):
    fake = FakeHost()

    # A plain function, not the bound method: it is set on the AnsibleModule class, so the module comes in first.
    patch_module(monkeypatch, lambda module, cmd, **kwargs: fake.run_command(module, cmd, **kwargs))  # pylint: disable=unnecessary-lambda
    return fake


def run(args, expect=Exit):
    return run_main(signed_image.main, args, expect)


BASE = {"image": REPO + ":v2.7", "key": PEM, "ignore_tlog": True, "insecure_registry": True,
        "registry_username": "fleet", "registry_password": "molecule-only-secret"}


def cmds(host, tool):
    return [c for c, env in host.calls if os.path.basename(c[0]) == tool]


def test_verifies_then_pulls_the_digest_never_the_tag_then_tags(host):
    result = run(dict(BASE, tag_as="pytorch-cuda:current"))
    assert result["changed"] and result["pulled"] and result["tagged"]
    assert result["digest"] == DIGEST and result["image_pinned"] == PINNED
    assert result["verified"]["by"] == "key" and result["verified"]["key_fingerprint"].startswith("SHA256:")
    verify = cmds(host, "cosign")[0]
    assert verify[1:4] == ["verify", "--output", "json"]
    assert "--insecure-ignore-tlog=true" in verify and "--allow-http-registry=true" in verify
    assert verify[-1] == REPO + ":v2.7"
    docker = cmds(host, "docker")
    pulls = [c for c in docker if "pull" in c]
    assert len(pulls) == 1 and pulls[0][-1] == PINNED and pulls[0][1] == "--config"
    assert ["/usr/bin/docker", "tag", PINNED, "pytorch-cuda:current"] in docker
    assert host.store["pytorch-cuda:current"] == host.store[PINNED]


def test_credentials_reach_cosign_by_docker_config_never_argv(host):
    run(BASE)
    verify, env = [(c, e) for c, e in host.calls if c[0].endswith("cosign")][0]
    assert "molecule-only-secret" not in " ".join(verify)
    assert env["DOCKER_CONFIG"].startswith("/") and env["LC_ALL"] == "C"
    assert not os.path.exists(env["DOCKER_CONFIG"]), "temporary credentials must be removed"


def test_second_run_by_tag_verifies_but_pulls_nothing(host):
    host.store.update({PINNED: "sha256:imageid1", "pytorch-cuda:current": "sha256:imageid1"})
    result = run(dict(BASE, tag_as="pytorch-cuda:current"))
    assert not result["changed"] and not result["pulled"] and not result["tagged"]
    assert len(cmds(host, "cosign")) == 1
    assert not [c for c in cmds(host, "docker") if "pull" in c or "tag" in c]


def test_digest_ref_already_present_is_verified_again_and_pulls_nothing(host):
    host.store[PINNED] = "sha256:imageid1"
    result = run(dict(BASE, image=PINNED))
    assert not result["changed"] and not result["pulled"]
    assert result["verified"]["by"] == "key" and result["verified"]["signatures"] == 1
    assert [c[-1] for c in cmds(host, "cosign")] == [PINNED]


def test_digest_ref_already_present_with_a_rotated_key_fails_and_keeps_the_store(host):
    host.store[PINNED] = "sha256:imageid1"
    case = FAILURES["signed with another key"]
    host.cosign = (case["rc"], "", case["stderr"])
    result = run(dict(BASE, image=PINNED), expect=Fail)
    assert result["reason"] == "no_matching_signature" and "Nothing was pulled" in result["msg"]
    assert host.store == {PINNED: "sha256:imageid1"}


def test_digest_ref_already_present_without_a_usable_cosign_fails_and_keeps_the_store(host, tmp_path):
    # An image on the node is never trusted unverified: no cosign means a failure, not a pass.
    host.store[PINNED] = "sha256:imageid1"
    result = run(dict(BASE, image=PINNED, cosign_path=str(tmp_path / "cosign")), expect=Fail)
    assert "cosign is not installed" in result["msg"] and "Nothing was pulled" in result["msg"]
    assert not cmds(host, "cosign") and not cmds(host, "docker")
    assert host.store == {PINNED: "sha256:imageid1"}


def test_check_mode_verifies_and_reports_the_pull(host):
    result = run(dict(BASE, tag_as="pytorch-cuda:current", _ansible_check_mode=True))
    assert result["changed"] and result["pulled"] and result["tagged"]
    assert len(cmds(host, "cosign")) == 1
    assert host.store == {}


@pytest.mark.parametrize("name,words", [
    ("unsigned image", "has no cosign signature"),
    ("signed with another key", "wrong key"),
    ("tag not in the registry", "does not have this tag"),
    ("wrong registry password", "refused the credentials"),
    ("nothing listens on the registry port", "could not be reached"),
])
def test_refusals_carry_the_reason_and_change_nothing(host, name, words):
    case = FAILURES[name]
    host.cosign = (case["rc"], "", case["stderr"])
    result = run(BASE, expect=Fail)
    assert result["reason"] == case["reason"] and words in result["msg"]
    assert "Nothing was pulled" in result["msg"]
    assert not [c for c in cmds(host, "docker") if "pull" in c or "tag" in c]
    assert host.store == {}


def test_digest_ref_verified_to_another_digest_is_refused(host):
    other = REPO + "@sha256:" + "e" * 64
    result = run(dict(BASE, image=other), expect=Fail)
    assert result["reason"] == "digest_mismatch"


@pytest.mark.parametrize("args,words", [
    ({"image": "Bad/Ref:1", "key": PEM}, "invalid image reference"),
    ({"image": REPO + ":v2.7"}, "give the cosign public key"),
    ({"image": REPO + ":v2.7", "key": "/nonexistent.pub"}, "neither PEM text nor a readable file"),
    ({"image": REPO + ":v2.7", "key": PEM, "tag_as": "x@sha256:" + "a" * 64}, "cannot carry a digest"),
])
def test_bad_input_fails_before_any_command(host, args, words):
    result = run(args, expect=Fail)
    assert words in result["msg"]
    assert host.calls == []


def test_absent_removes_alias_and_the_digest_it_pointed_to(host):
    host.store.update({PINNED: "sha256:imageid1", "pytorch-cuda:current": "sha256:imageid1"})
    result = run({"image": REPO + ":v2.7", "tag_as": "pytorch-cuda:current", "state": "absent"})
    assert result["changed"] and set(result["removed"]) == {PINNED, "pytorch-cuda:current"}
    assert host.store == {} and cmds(host, "cosign") == []
