#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: signed_image
short_description: Put a container image on a node only when its cosign signature verifies, pulled by digest
version_added: "0.1.0"
description:
  - Runs C(cosign verify -o json) against the registry, takes the C(docker-manifest-digest) from the payloads
    cosign verified, and pulls C(<repository>@sha256:<digest>) with Docker or Podman. It never pulls the tag, so a
    tag moved after verification cannot slip in. Then tags the local alias O(tag_as).
  - "The signature must be bound to what was asked: a verified payload's C(critical.identity.docker-reference)
    must name the repository of O(image) and, when O(image) carries a tag, its C(tag) annotation (C(cosign sign -a
    tag=<tag>)) must be that tag. A tag re-pointed to another image signed by the same key for another tag or
    repository (a rollback) is refused with reason C(reference_mismatch)."
  - "Every run asks the registry for the signatures and verifies them with the key given now, also when the digest
    is already on the node, so a rotated or revoked key takes effect at the next run. Nothing is pulled when the
    verified digest is already present, and the result is then C(changed=false)."
  - A failed verification fails the task with the reason in words (no signature, signed by another key, tag not
    found, registry unreachable, credentials refused) and leaves the image store as it was.
  - Check mode verifies for real and reports what it would pull and tag.
options:
  image:
    description:
      - Image reference, by tag (C(registry.example.com/ml/pytorch-cuda:v2.7)) or by digest
        (C(registry.example.com/ml/pytorch-cuda@sha256:...)).
    type: str
    required: true
  key:
    description:
      - Cosign public key, as a path on the node or as the PEM text itself.
      - Required with O(state=present) unless O(certificate_identity) and O(certificate_oidc_issuer) are given.
    type: str
  digest:
    description:
      - The digest (C(sha256:...)) this run resolved and verified once for O(image), e.g. on the first node.
        cosign then verifies C(<repository>@<digest>) and the tag is not resolved again on this node, so every node
        gets exactly that digest; the tag annotation is still checked against the tag of O(image).
    type: str
  require_tag_annotation:
    description:
      - Refuse a signature without a C(tag) annotation when O(image) names a tag (without this, such a signature
        binds to the repository only).
    type: bool
    default: false
  certificate_identity:
    description: Identity a keyless (Fulcio) signing certificate must carry, e.g. the CI workflow URL.
    type: str
  certificate_oidc_issuer:
    description: OIDC issuer a keyless signing certificate must carry.
    type: str
  ignore_tlog:
    description:
      - Do not require a Rekor transparency log entry (C(--insecure-ignore-tlog)); for images signed privately
        with C(cosign sign --tlog-upload=false).
    type: bool
    default: false
  registry_username:
    description: User for registry basic auth; passed to cosign and the engine in a private temporary config.
    type: str
  registry_password:
    description: Password or token for O(registry_username).
    type: str
  insecure_registry:
    description:
      - Let cosign talk plain HTTP or skip TLS checks (C(--allow-http-registry --allow-insecure-registry)).
        The engine must trust the registry itself (Docker C(insecure-registries), Podman C(registries.conf)).
    type: bool
    default: false
  engine:
    description: Container engine whose image store receives the image.
    type: str
    choices: [docker, podman]
    default: docker
  tag_as:
    description: Local alias to tag the verified image with, e.g. C(pytorch-cuda:current).
    type: str
  state:
    description:
      - V(present) verifies and pulls; V(verified) only verifies (and resolves the tag to its digest), nothing is
        pulled and no engine is needed; V(absent) removes the O(tag_as) alias and the image reference (by digest
        when O(image) is one, else the digests of O(image)'s repository the alias pointed to), without asking the
        registry.
    type: str
    choices: [present, verified, absent]
    default: present
  cosign_path:
    description: The cosign binary; looked up on PATH when not given.
    type: path
  timeout:
    description: Seconds cosign may take for the verification (C(--timeout)).
    type: int
    default: 180
author:
  - gpufleet contributors (!UNKNOWN)
requirements:
  - cosign 2.2 or later on the node (C(--allow-http-registry)); Docker or Podman.
notes:
  - Supports check mode.
  - Registry credentials never appear on a command line; they are written to a mode 0600 Docker config in a
    temporary directory (C(DOCKER_CONFIG) for cosign, C(--config) for docker, C(--authfile) for podman) that is
    removed at the end.
"""

EXAMPLES = r"""
- name: Put the signed training image on the node
  gpufleet.cluster.signed_image:
    image: registry.example.com/ml/pytorch-cuda:v2.7
    key: "{{ lookup('ansible.builtin.file', 'files/cosign.pub') }}"
    ignore_tlog: true
    registry_username: fleet
    registry_password: "{{ vault_registry_password }}"
    tag_as: pytorch-cuda:current

- name: Keyless, signed by a CI workflow
  gpufleet.cluster.signed_image:
    image: ghcr.io/example/pytorch-cuda@sha256:5c99d8ed73711e9c33aeb592029fcb427c0595c0aa07edfd8165dbfb9a3b1206
    certificate_identity: https://github.com/example/images/.github/workflows/release.yaml@refs/heads/main
    certificate_oidc_issuer: https://token.actions.githubusercontent.com

- name: Resolve the tag and verify it once for the run (nothing is pulled)
  gpufleet.cluster.signed_image:
    image: registry.example.com/ml/pytorch-cuda:v2.7
    key: "{{ lookup('ansible.builtin.file', 'files/cosign.pub') }}"
    require_tag_annotation: true
    state: verified
  run_once: true
  register: resolved

- name: Pull exactly that digest on every node, the signature checked for the tag v2.7
  gpufleet.cluster.signed_image:
    image: registry.example.com/ml/pytorch-cuda:v2.7
    digest: "{{ resolved.digest }}"
    key: "{{ lookup('ansible.builtin.file', 'files/cosign.pub') }}"
    require_tag_annotation: true

- name: Remove the alias and the image it pointed to
  gpufleet.cluster.signed_image:
    image: registry.example.com/ml/pytorch-cuda:v2.7
    tag_as: pytorch-cuda:current
    state: absent
"""

RETURN = r"""
digest:
  description: Manifest digest cosign verified (and that was pulled).
  returned: when state is present or verified
  type: str
  sample: sha256:5c99d8ed73711e9c33aeb592029fcb427c0595c0aa07edfd8165dbfb9a3b1206
image_pinned:
  description: The reference the engine pulls, repository and verified digest.
  returned: when state is present or verified
  type: str
  sample: registry.example.com/ml/pytorch-cuda@sha256:5c99d8ed73711e9c33aeb592029fcb427c0595c0aa07edfd8165dbfb9a3b1206
pulled:
  description: Whether the image was pulled (or, in check mode, would be).
  returned: always
  type: bool
tagged:
  description: Whether O(tag_as) was (or would be) pointed at the verified image.
  returned: always
  type: bool
verified:
  description:
    - What the signature was verified against, in this run (there is no path that trusts a local image without
      asking the registry).
  returned: when state is present or verified
  type: dict
  contains:
    by: {description: "C(key) or C(keyless)", type: str}
    key_fingerprint: {description: SHA-256 of the public key (DER), type: str}
    identities: {description: Subject and issuer of keyless signatures, type: list}
    signatures: {description: Number of signature payloads cosign verified, type: int}
    docker_references: {description: The docker-reference claims of the payloads, type: list}
    tags: {description: The tag annotations of the payloads (C(null) for a payload without one), type: list}
    bound_to: {description: "What the signature was checked to be made for (repository, and tag when asked)", type: str}
removed:
  description: References removed with O(state=absent).
  returned: when state is absent
  type: list
reason:
  description:
    - Short code of the failure (no_signature, no_matching_signature, tag_not_found, auth_refused, unreachable,
      digest_mismatch, reference_mismatch, ...).
  returned: on verification failure
  type: str
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import cosign as cs

C_ENV = {"LANGUAGE": "C", "LC_ALL": "C"}


class Engine(object):
    """Docker or Podman, with an optional private auth config."""

    def __init__(self, module, name, config_dir):
        self.module = module
        self.name = name
        self.bin = module.get_bin_path(name)
        if not self.bin:
            module.fail_json(msg="%s is not installed on this node (install the container engine first); nothing "
                             "was pulled" % name)
        self.config_dir = config_dir

    def run(self, args, check_rc=False):
        return self.module.run_command([self.bin] + args, environ_update=C_ENV, check_rc=check_rc)

    def pull(self, ref):
        """Pull ``ref`` with the private credentials, when there are some."""
        if self.config_dir and self.name == "docker":
            return self.run(["--config", self.config_dir, "pull", ref])
        if self.config_dir:
            return self.run(["pull", "--authfile", os.path.join(self.config_dir, "config.json"), ref])
        return self.run(["pull", ref])

    def image_id(self, ref):
        """Local image ID of ``ref``, or None when the store has no such reference."""
        rc, out, err = self.run(["image", "inspect", "--format", "{{.Id}}", ref])
        if rc != 0:
            return None
        return out.strip().splitlines()[0] if out.strip() else None

    def repo_digests(self, ref):
        rc, out, err = self.run(["image", "inspect", "--format", "{{json .RepoDigests}}", ref])
        if rc != 0:
            return []
        try:
            return json.loads(out.strip() or "[]") or []
        except ValueError:
            return []


def verify(module, parsed, key_file, config_dir):
    p = module.params
    cosign = p["cosign_path"] or module.get_bin_path("cosign")
    if not cosign or (p["cosign_path"] and not os.access(cosign, os.X_OK)):
        module.fail_json(msg="cosign is not installed on %s (%s; install it, or set cosign_path). Nothing was pulled; "
                         "the image store is unchanged." % (p["image"], cosign or "not on PATH"))
    cmd = [cosign, "verify", "--output", "json", "--timeout", "%ds" % p["timeout"]]
    if key_file:
        cmd += ["--key", key_file]
    else:
        cmd += ["--certificate-identity", p["certificate_identity"],
                "--certificate-oidc-issuer", p["certificate_oidc_issuer"]]
    if p["ignore_tlog"]:
        cmd.append("--insecure-ignore-tlog=true")
    if p["insecure_registry"]:
        cmd += ["--allow-http-registry=true", "--allow-insecure-registry=true"]
    target = cs.pinned_ref(parsed, parsed["digest"]) if parsed["digest"] else p["image"]
    cmd.append(target)
    env = dict(C_ENV)
    if config_dir:
        env["DOCKER_CONFIG"] = config_dir
    rc, out, err = module.run_command(cmd, environ_update=env)
    if rc != 0:
        reason, detail = cs.classify_failure(rc, err)
        module.fail_json(msg=cs.failure_message(p["image"], reason, detail), reason=reason, rc=rc,
                         stderr=err, changed=False, pulled=False, tagged=False)
    try:
        result = cs.parse_verify_output(out)
    except ValueError as exc:
        module.fail_json(msg="%s: cosign verify succeeded but its output could not be read (%s); nothing was "
                         "pulled" % (p["image"], exc), reason="unknown", stdout=out, changed=False,
                         pulled=False, tagged=False)
    if len(result["digests"]) != 1 or (parsed["digest"] and result["digests"] != [parsed["digest"]]):
        module.fail_json(msg=cs.failure_message(p["image"], "digest_mismatch", ", ".join(result["digests"])),
                         reason="digest_mismatch", changed=False, pulled=False, tagged=False)
    bound, detail = cs.check_binding(result, parsed, p["require_tag_annotation"])
    if not bound:
        module.fail_json(msg=cs.failure_message(p["image"], "reference_mismatch", detail),
                         reason="reference_mismatch", digest=result["digests"][0], changed=False, pulled=False,
                         tagged=False, docker_references=result["docker_references"],
                         tags=[c["tag"] for c in result["claims"]])
    return result


def tag_alias(module, engine, pinned, alias):
    """Point ``alias`` at ``pinned``; return True when it changed (or would)."""
    if not alias:
        return False
    want = engine.image_id(pinned)
    if want is not None and engine.image_id(alias) == want:
        return False
    if not module.check_mode:
        engine.run(["tag", pinned, alias], check_rc=True)
    return True


def verified_only(module, parsed, key_file, key_pem, config_dir):
    """Verify against the registry now and return what was verified; the one path every state goes through."""
    verified = verify(module, parsed, key_file, config_dir)
    digest = verified["digests"][0]
    return {
        "changed": False, "pulled": False, "tagged": False,
        "digest": digest,
        "image_pinned": cs.pinned_ref(parsed, digest),
        "verified": {
            "by": "key" if key_file else "keyless",
            "key_fingerprint": cs.key_fingerprint(key_pem) if key_pem else None,
            "identities": verified["identities"],
            "signatures": verified["count"],
            "docker_references": verified["docker_references"],
            "tags": [c["tag"] for c in verified["claims"]],
            "bound_to": ("%s:%s" % (parsed["name"], parsed["tag"])) if parsed["tag"] else parsed["name"],
        },
    }


def present(module, parsed, engine, key_file, key_pem, config_dir):
    p = module.params
    result = verified_only(module, parsed, key_file, key_pem, config_dir)
    digest, pinned = result["digest"], result["image_pinned"]
    if engine.image_id(pinned) is None:
        result["pulled"] = True
        if not module.check_mode:
            rc, out, err = engine.pull(pinned)
            if rc != 0:
                reason, detail = cs.classify_failure(rc, err)
                module.fail_json(msg="%s: verified digest %s could not be pulled: %s (%s)"
                                 % (p["image"], digest, cs.REASON_TEXT.get(reason, "pull failed"),
                                    detail or err.strip()), reason=reason, digest=digest, changed=False,
                                 pulled=False, tagged=False)
    if p["tag_as"]:
        if module.check_mode and result["pulled"]:
            result["tagged"] = True
        else:
            result["tagged"] = tag_alias(module, engine, pinned, p["tag_as"])
    result["changed"] = result["pulled"] or result["tagged"]
    return result


def absent(module, parsed, engine):
    p = module.params
    targets = []
    if parsed["digest"]:
        targets.append(cs.pinned_ref(parsed, parsed["digest"]))
    elif p["tag_as"] and engine.image_id(p["tag_as"]):
        prefix = parsed["name"] + "@"
        short = parsed["path"] + "@"
        targets += [d for d in engine.repo_digests(p["tag_as"]) if d.startswith(prefix) or d.startswith(short)]
    if p["tag_as"]:
        targets.append(p["tag_as"])
    removed = [t for t in targets if engine.image_id(t) is not None]
    if removed and not module.check_mode:
        for ref in removed:
            if engine.image_id(ref) is not None:
                engine.run(["image", "rm", ref], check_rc=True)
    return {"changed": bool(removed), "removed": removed, "pulled": False, "tagged": False}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            digest=dict(type="str"),
            require_tag_annotation=dict(type="bool", default=False),
            key=dict(type="str", no_log=False),
            certificate_identity=dict(type="str"),
            certificate_oidc_issuer=dict(type="str"),
            ignore_tlog=dict(type="bool", default=False),
            registry_username=dict(type="str"),
            registry_password=dict(type="str", no_log=True),
            insecure_registry=dict(type="bool", default=False),
            engine=dict(type="str", choices=["docker", "podman"], default="docker"),
            tag_as=dict(type="str"),
            state=dict(type="str", choices=["present", "verified", "absent"], default="present"),
            cosign_path=dict(type="path"),
            timeout=dict(type="int", default=180),
        ),
        mutually_exclusive=[("key", "certificate_identity")],
        required_together=[("certificate_identity", "certificate_oidc_issuer"),
                           ("registry_username", "registry_password")],
        supports_check_mode=True,
    )
    p = module.params
    try:
        parsed = cs.parse_image_ref(p["image"])
        if p["digest"]:
            if not cs.DIGEST_RE.match(p["digest"]):
                raise cs.ImageRefError("digest %s: must be sha256: followed by 64 lowercase hex characters"
                                       % p["digest"])
            if parsed["digest"] and parsed["digest"] != p["digest"]:
                raise cs.ImageRefError("%s carries another digest than digest %s" % (p["image"], p["digest"]))
            parsed["digest"] = p["digest"]
        if p["tag_as"]:
            alias = cs.parse_image_ref(p["tag_as"])
            if alias["digest"]:
                raise cs.ImageRefError("tag_as %s: an alias cannot carry a digest" % p["tag_as"])
    except cs.ImageRefError as exc:
        module.fail_json(msg="invalid image reference: %s; nothing was changed" % exc)

    verifying = p["state"] in ("present", "verified")
    if verifying and not p["key"] and not p["certificate_identity"]:
        module.fail_json(msg="%s: give the cosign public key (key) or the keyless identity "
                         "(certificate_identity and certificate_oidc_issuer); nothing was changed" % p["image"])

    key_pem, key_file = None, None
    if verifying and p["key"]:
        if cs.is_pem(p["key"]):
            key_pem = p["key"]
        elif os.path.isfile(p["key"]):
            with open(p["key"], "r") as handle:
                key_pem = handle.read()
            key_file = p["key"]
        else:
            module.fail_json(msg="%s: key %s is neither PEM text nor a readable file on this node; nothing was "
                             "changed" % (p["image"], p["key"]))

    tmpdir = tempfile.mkdtemp(prefix="gpufleet-signed-image-")
    os.chmod(tmpdir, 0o700)
    try:
        if key_pem and not key_file:
            key_file = os.path.join(tmpdir, "cosign.pub")
            with open(key_file, "w") as handle:
                handle.write(key_pem if key_pem.endswith("\n") else key_pem + "\n")
        config_dir = None
        if p["registry_username"]:
            config_dir = os.path.join(tmpdir, "auth")
            os.mkdir(config_dir, 0o700)
            path = os.path.join(config_dir, "config.json")
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
                handle.write(cs.docker_config(parsed["registry"], p["registry_username"], p["registry_password"]))
        if p["state"] == "verified":
            result = verified_only(module, parsed, key_file, key_pem, config_dir)
        else:
            engine = Engine(module, p["engine"], config_dir)
            if p["state"] == "present":
                result = present(module, parsed, engine, key_file, key_pem, config_dir)
            else:
                result = absent(module, parsed, engine)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
