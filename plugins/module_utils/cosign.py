# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure helpers for signed image distribution with cosign.

Parses image references the way Docker does, reads the JSON that ``cosign verify -o json`` prints,
and turns a failed verification (exit code and stderr) into a reason an operator can act on.
No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import re

DOCKER_HUB = "docker.io"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# Docker's reference grammar, simplified: registry host components may not contain "_".
_HOST_RE = re.compile(r"^(localhost|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|\[[0-9a-fA-F:]+\])(:[0-9]+)?$|^[A-Za-z0-9-]+:[0-9]+$")
_PATH_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

# cosign exit codes for verify (sigstore/cosign cmd/cosign/errors/exit_codes.go, cosign >= 2.0).
EXIT_NO_SIGNATURE = 10
EXIT_NON_EXISTENT_TAG = 11
EXIT_NO_MATCHING_SIGNATURE = 12

# (reason, stderr patterns) checked in order; the first that matches wins. Patterns come from real
# cosign stderr (tests/fixtures/cosign/) so a cosign build that exits 1 for everything still maps.
_STDERR_REASONS = (
    ("auth_refused", ("unauthorized", "authentication required", "denied: requested access",
                      "401 unauthorized", "403 forbidden", "incorrect username or password")),
    ("tlog", ("rekor", "tuf:", "tuf remote", "transparency log", "tlog entr")),
    ("unreachable", ("no such host", "connection refused", "i/o timeout", "network is unreachable",
                     "server misbehaving", "connection reset", "tls: handshake", "x509:",
                     "http response to https client", "context deadline exceeded",
                     "no route to host")),
    ("tag_not_found", ("manifest_unknown", "manifest unknown", "name_unknown", "repository name not known",
                       "not found: manifest")),
    ("no_matching_signature", ("no matching signatures",)),
    ("no_signature", ("no signatures found",)),
    ("key_invalid", ("loading public key", "pem", "reading key", "invalid public key", "no such file")),
)

_EXIT_REASONS = {
    EXIT_NO_SIGNATURE: "no_signature",
    EXIT_NON_EXISTENT_TAG: "tag_not_found",
    EXIT_NO_MATCHING_SIGNATURE: "no_matching_signature",
}

REASON_TEXT = {
    "no_signature": "the image has no cosign signature at all",
    "no_matching_signature": "the image is signed, but by no key or identity that was given (wrong key)",
    "tag_not_found": "the registry does not have this tag or digest",
    "auth_refused": "the registry refused the credentials (or asked for some)",
    "unreachable": "the registry could not be reached",
    "tlog": ("the transparency log (Rekor, and Sigstore's TUF root) could not be reached or does not vouch for "
             "the signature; images signed with --tlog-upload=false need ignore_tlog"),
    "key_invalid": "the public key could not be read",
    "digest_mismatch": "cosign verified a different digest than the one asked for",
    "reference_mismatch": ("the signature is valid but was made for another repository or tag (a tag re-pointed to "
                           "another signed image, e.g. a rollback)"),
    "unknown": "cosign verify failed",
}


class ImageRefError(ValueError):
    """Raised for an image reference Docker would not accept."""


def parse_image_ref(ref):
    """Split ``[registry/]path[:tag][@sha256:digest]`` into its parts.

    Returns a dict with ``name`` (the reference without tag/digest, as written), ``registry``
    (``docker.io`` when none is named), ``path``, ``tag`` and ``digest`` (None when absent).
    """
    if not isinstance(ref, str) or not ref.strip() or ref != ref.strip():
        raise ImageRefError("empty image reference or surrounding spaces: %r" % (ref,))
    rest, digest = ref, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not DIGEST_RE.match(digest):
            raise ImageRefError("%s: the digest must be sha256: followed by 64 lowercase hex characters" % ref)
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise ImageRefError("%s: invalid tag %r" % (ref, tag))
    parts = rest.split("/", 1)
    if len(parts) == 2 and (("." in parts[0] or ":" in parts[0]) or parts[0] == "localhost"):
        registry, path = parts
        if not _HOST_RE.match(registry):
            raise ImageRefError("%s: invalid registry host %r (Docker allows letters, digits, '-' and '.')"
                                % (ref, registry))
    else:
        registry, path = DOCKER_HUB, rest
    if not path or not _PATH_RE.match(path):
        raise ImageRefError("%s: invalid repository path %r (lowercase letters, digits, '.', '_', '-', '/')"
                            % (ref, path))
    return {"name": rest, "registry": registry, "path": path, "tag": tag, "digest": digest}


def pinned_ref(parsed, digest):
    """``name@sha256:...``: the reference that pulls exactly the verified manifest."""
    return "%s@%s" % (parsed["name"], digest)


def auth_key(registry):
    """Key of the ``auths`` entry in a Docker config.json for ``registry``."""
    return "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry


def docker_config(registry, username, password):
    """A Docker ``config.json`` document carrying basic auth for one registry (read by cosign, docker,
    podman ``--authfile``)."""
    token = base64.b64encode(("%s:%s" % (username, password)).encode("utf-8")).decode("ascii")
    return json.dumps({"auths": {auth_key(registry): {"auth": token}}}, sort_keys=True)


def is_pem(text):
    return isinstance(text, str) and "-----BEGIN " in text


def key_fingerprint(pem):
    """SHA-256 over the DER bytes of the first PEM block (what ``openssl pkey -pubin -outform DER |
    sha256sum`` prints), or None when it is not PEM."""
    match = re.search(r"-----BEGIN [A-Z ]+-----(.*?)-----END [A-Z ]+-----", pem or "", re.S)
    if not match:
        return None
    try:
        der = base64.b64decode("".join(match.group(1).split()), validate=True)
    except (ValueError, TypeError):
        return None
    return "SHA256:" + hashlib.sha256(der).hexdigest()


def parse_verify_output(stdout):
    """Read the JSON array ``cosign verify -o json`` prints on stdout.

    Returns ``{"digests": [...], "docker_references": [...], "identities": [...], "count": n}``;
    identities are ``{"subject", "issuer"}`` pairs of keyless signatures. Raises ValueError when
    stdout holds no signature payloads.
    """
    text = (stdout or "").strip()
    start = text.find("[")
    if start < 0:
        raise ValueError("cosign printed no JSON payloads")
    payloads = json.loads(text[start:])
    if not isinstance(payloads, list) or not payloads:
        raise ValueError("cosign printed an empty list of verified signatures")
    digests, refs, identities, claims = [], [], [], []
    for payload in payloads:
        critical = payload.get("critical") or payload.get("Critical") or {}
        image = critical.get("image") or critical.get("Image") or {}
        digest = image.get("docker-manifest-digest") or image.get("Docker-manifest-digest")
        if not digest or not DIGEST_RE.match(digest):
            raise ValueError("a verified payload carries no valid docker-manifest-digest: %r" % (image,))
        if digest not in digests:
            digests.append(digest)
        identity = critical.get("identity") or critical.get("Identity") or {}
        ref = identity.get("docker-reference")
        if ref and ref not in refs:
            refs.append(ref)
        optional = payload.get("optional") or {}
        tag = optional.get("tag") if isinstance(optional, dict) else None
        claims.append({"docker_reference": ref, "tag": tag if isinstance(tag, str) else None})
        subject = optional.get("Subject")
        issuer = optional.get("Issuer") or optional.get("1.3.6.1.4.1.57264.1.1")
        if subject or issuer:
            pair = {"subject": subject, "issuer": issuer}
            if pair not in identities:
                identities.append(pair)
    return {"digests": digests, "docker_references": refs, "identities": identities, "count": len(payloads),
            "claims": claims}


_DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")


def normalize_repository(name):
    """``registry/path`` of a repository the way go-containerregistry names it, so that what was signed
    (cosign's ``docker-reference``) and what was asked compare equal: Docker Hub under one name, its
    single-component paths under ``library/``, the registry host in lowercase."""
    parsed = parse_image_ref(name)
    registry, path = parsed["registry"].lower(), parsed["path"]
    if registry in _DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in path:
            path = "library/" + path
    return "%s/%s" % (registry, path)


def check_binding(verified, parsed, require_tag_annotation=False):
    """Whether one verified payload was signed for the repository (and tag) that was asked.

    A payload binds when its ``critical.identity.docker-reference`` names the repository of ``parsed`` and,
    when ``parsed`` carries a tag, its ``tag`` annotation (``cosign sign -a tag=<tag>``) equals that tag; a
    payload without the annotation binds to the repository only, unless ``require_tag_annotation``.
    Returns ``(True, "")`` or ``(False, detail)`` naming what the signatures were made for.
    """
    want = normalize_repository(parsed["name"])
    tag = parsed["tag"]
    seen = []
    for claim in verified.get("claims") or []:
        ref = claim.get("docker_reference")
        try:
            repo = normalize_repository(ref) if ref else None
        except ImageRefError:
            repo = None
        seen.append("%s%s" % (ref or "(no docker-reference)",
                              (" tag=%s" % claim["tag"]) if claim.get("tag") else " (no tag annotation)"))
        if repo != want:
            continue
        if tag is None:
            return True, ""
        if claim.get("tag") == tag or (claim.get("tag") is None and not require_tag_annotation):
            return True, ""
    asked = "%s:%s" % (parsed["name"], tag) if tag else parsed["name"]
    need = (" with the annotation tag=%s" % tag) if tag else ""
    return False, "asked for %s%s, signed for %s" % (asked, need, "; ".join(seen) or "nothing")


def classify_failure(rc, stderr):
    """Map a failed ``cosign verify`` to ``(reason, detail)``.

    stderr is read first (registry and network errors exit 1 on every cosign version; its wording is
    stable across versions), then the documented exit codes 10/11/12.
    """
    text = (stderr or "").lower()
    for reason, patterns in _STDERR_REASONS:
        if any(p in text for p in patterns):
            return reason, _last_error_line(stderr)
    return _EXIT_REASONS.get(rc, "unknown"), _last_error_line(stderr)


def _last_error_line(stderr):
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line
    return lines[-1] if lines else ""


def failure_message(image, reason, detail):
    """One sentence for the operator: what failed, why, and that nothing changed."""
    text = "%s: signature verification failed: %s" % (image, REASON_TEXT.get(reason, REASON_TEXT["unknown"]))
    if detail:
        text += " (cosign: %s)" % detail
    return text + ". Nothing was pulled; the image store is unchanged."
