"""gpufleet.cluster.ssh_keypair_drift against community.crypto.openssh_keypair itself: whenever the module (in check
mode) would change the key pair, the filter must name a difference, and on a pair the module leaves alone it must
find none. cluster_ssh skips the module on the filter's word, so a looser reading would hide drift."""
import os
import subprocess

import pytest

from ansible_collections.community.crypto.plugins.modules import openssh_keypair
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_keypair import keypair_drift
from module_harness import Exit, Fail, patch_exits, run_main

COMMENT = "trainer@demo"


@pytest.fixture
def pair(tmp_path, monkeypatch):
    patch_exits(monkeypatch)
    path = str(tmp_path / "keys" / "cluster-ed25519")
    os.mkdir(os.path.dirname(path), 0o700)
    result = module(path)
    assert result["changed"] is True and os.path.exists(path + ".pub")
    return path


def module(path, check=False, expect=Exit):
    """community.crypto.openssh_keypair as cluster_ssh calls it; check mode only reports."""
    return run_main(openssh_keypair.main, {"path": path, "type": "ed25519", "comment": COMMENT, "mode": "0600",
                                           "_ansible_check_mode": check}, expect=expect)


def module_acts(path):
    """True when the module in check mode would change the pair, or refuses it (a private key others can read:
    ssh-keygen will not load it, and the module stops)."""
    result = module(path, check=True, expect=(Exit, Fail))
    if "changed" not in result:  # failed
        assert "Unable to read the key" in result["msg"], result
        return True
    return result["changed"]


def test_the_pair_the_module_made_has_no_drift_and_the_module_agrees(pair):
    assert keypair_drift(pair, COMMENT) == [] and keypair_drift(pair, COMMENT, "0600") == []
    assert module(pair, check=True)["changed"] is False


def other_key(tmp_path):
    path = str(tmp_path / "other")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", COMMENT, "-f", path], check=True)
    return path


def drift_private_mode(pair, tmp_path):
    os.chmod(pair, 0o644)


def drift_public_mode(pair, tmp_path):
    os.chmod(pair + ".pub", 0o644)


def drift_public_gone(pair, tmp_path):
    os.unlink(pair + ".pub")


def drift_private_gone(pair, tmp_path):
    os.unlink(pair)


def drift_public_of_another_key(pair, tmp_path):
    with open(other_key(tmp_path) + ".pub") as handle, open(pair + ".pub", "w") as out:
        out.write(handle.read())


def drift_private_replaced_by_another_key(pair, tmp_path):
    with open(other_key(tmp_path), "rb") as handle, open(pair, "wb") as out:
        out.write(handle.read())


def drift_comment(pair, tmp_path):
    with open(pair + ".pub") as handle:
        kind, data = handle.read().split()[:2]
    with open(pair + ".pub", "w") as out:
        out.write("%s %s someone@else\n" % (kind, data))


def drift_private_is_rsa(pair, tmp_path):
    path = str(tmp_path / "rsa")
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-C", COMMENT, "-f", path], check=True)
    for suffix in ("", ".pub"):
        with open(path + suffix, "rb") as handle, open(pair + suffix, "wb") as out:
            out.write(handle.read())


@pytest.mark.parametrize("drift", [drift_private_mode, drift_public_mode, drift_public_gone, drift_private_gone,
                                   drift_public_of_another_key, drift_private_replaced_by_another_key, drift_comment,
                                   drift_private_is_rsa])
def test_whatever_the_module_would_change_is_named(pair, tmp_path, drift):
    drift(pair, tmp_path)
    assert module_acts(pair)
    assert keypair_drift(pair, COMMENT) != []


def test_what_the_module_refuses_is_named_too(pair, tmp_path):
    """A passphrase: the module fails rather than guess; the filter must not call the pair as asked."""
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "secret phrase", "-f", pair], check=True)
    assert any("not an unencrypted OpenSSH private key" in problem for problem in keypair_drift(pair, COMMENT))


def test_a_link_and_a_relative_path_are_left_to_the_module(pair, tmp_path):
    link = str(tmp_path / "keys" / "linked")
    os.symlink(pair, link)
    os.symlink(pair + ".pub", link + ".pub")
    assert keypair_drift(link, COMMENT) == ["%s is not a regular file" % link, "%s.pub is not a regular file" % link]
    assert keypair_drift("keys/cluster-ed25519", COMMENT) != []


def test_a_pair_of_another_user_is_named(pair, tmp_path):
    os.chown(pair, 1, -1)
    assert keypair_drift(pair, COMMENT) == ["%s belongs to uid 1, not to this user" % pair]
