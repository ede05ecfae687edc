"""The signed training image (image_security): on the node by the digest that was verified, and run through the
node's launcher as the training user."""
import hashlib
import json
import re

import pytest

from fleet import key_value_lines


def key_fingerprint(pem):
    """SHA-256 of the public key's DER bytes, as `openssl pkey -pubin -outform DER | sha256sum` prints it."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(pem.encode("ascii"))
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "SHA256:" + hashlib.sha256(der).hexdigest()


def _repository(reference):
    """registry/path of a reference, without its tag or digest."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[:name.rindex(":")]
    return name


@pytest.fixture(scope="module")
def record(node, expect):
    text = node.read(expect["image"]["record"])
    assert text, "%s: no image record %s: image_security has not verified and pulled an image here" % (
        node.name, expect["image"]["record"])
    return json.loads(text)


def test_record_names_the_inventory_image(node, expect, record):
    reference = expect["image"]["reference"]
    assert record["image"] == reference, "%s holds %s, the inventory names %s" % (node.name, record["image"], reference)
    assert re.match(r"^sha256:[0-9a-f]{64}$", record["digest"]), record["digest"]
    assert record["pinned"] == "%s@%s" % (_repository(reference), record["digest"]), record["pinned"]
    if "@sha256:" in reference:
        assert record["digest"] == reference.split("@", 1)[1], (
            "%s verified %s, the inventory pins %s" % (node.name, record["digest"], reference))


def test_record_was_verified_with_the_inventory_key(node, expect, record):
    pem = expect["image"]["cosign_public_key"]
    if not pem.strip():
        pytest.skip("keyless verification for %s (image_security_certificate_identity %s): no key to compare"
                    % (node.name, expect["image"]["certificate_identity"] or "unset"))
    assert record["key_fingerprint"] == key_fingerprint(pem), (
        "%s: the image was verified with key %s, the inventory's key is %s"
        % (node.name, record["key_fingerprint"], key_fingerprint(pem)))


def test_verified_digest_present_in_the_engine(node, expect, record):
    engine = expect["image"]["engine"]
    out = node.check("%s image inspect --format '{{json .RepoDigests}}' %%s" % engine, record["pinned"])
    assert record["pinned"] in json.loads(out), "%s: %s has RepoDigests %s" % (node.name, record["pinned"], out)


def test_scan_gate(node, expect, record):
    image = expect["image"]
    if image["scan"] == "off":
        assert record["scan"]["status"] == "skipped", record["scan"]
        assert image["scan_off_reason"] in record["scan"]["reason"], record["scan"]
        pytest.skip("the scan gate is off for %s: %s" % (node.name, image["scan_off_reason"]))
    assert record["scan"]["status"] == "passed", "%s: %s" % (node.name, record["scan"])
    assert record["scan"]["digest"] == record["digest"], (
        "%s: Trivy scanned %s, the node holds %s" % (node.name, record["scan"]["digest"], record["digest"]))


def test_launcher_runs_the_verified_image_as_the_training_user(node, expect, record):
    """The training user starts the image through the launcher: the pinned digest, its own uid, the memlock limit
    and the node's fabric settings inside."""
    image = expect["image"]
    if not image["launcher"]:
        pytest.skip("image_security_launcher is false for %s" % node.name)
    user, uid = expect["training_user"], expect["training_uid"]
    assert user in image["launcher_users"], image["launcher_users"]
    launcher = image["launcher_path"]
    printed = node.check("runuser -u %s -- %s --print-image", user, launcher).strip()
    assert printed == record["pinned"], "%s: the launcher runs %s, the node verified %s" % (node.name, printed,
                                                                                            record["pinned"])
    out = node.check("runuser -u %s -- %s sh -c 'id -u; ulimit -l; printenv NCCL_SOCKET_IFNAME || true'",
                     user, launcher).split("\n")
    assert out[0].strip() == str(uid), "%s: the container ran as uid %s, the training user is %s" % (
        node.name, out[0], uid)
    memlock = int(image["launcher_memlock"])
    want = "unlimited" if memlock < 0 else str(memlock // 1024)
    assert out[1].strip() == want, "%s: memlock in the container is %s KiB, want %s" % (node.name, out[1], want)
    fabric = key_value_lines(node.read(image["launcher_fabric_env"]) if image["launcher_fabric_env"] else "")
    if "NCCL_SOCKET_IFNAME" in fabric:
        assert out[2].strip() == fabric["NCCL_SOCKET_IFNAME"], (
            "%s: NCCL_SOCKET_IFNAME in the container is %r, the fabric env file says %r"
            % (node.name, out[2], fabric["NCCL_SOCKET_IFNAME"]))
