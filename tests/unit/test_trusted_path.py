"""trusted_path.untrusted_step, and the modules that write as root refusing a path another account could replace.

The attacks of issue "No path from the training user to root": a user's ~/.ssh swapped for a link to a root-owned
directory, a file in it made a link to /etc/shadow, a group- or world-writable directory on the way. Files are made
under tmp_path with a uid no account here uses standing for the training user; os.lchown needs root, as the tests
of the managed_files module do.
"""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.trusted_path import untrusted_step
from ansible_collections.gpufleet.cluster.plugins.modules import line_settings, managed_files
from module_harness import Fail, patch_module, run_main

USER = 54321  # the training user: no account of the test machine has this uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def tree(tmp_path):
    """A root-owned tree: etc/ (root, 0755), usr/local/bin (root, 0755), home/ (root) with home/user (USER, 0750)."""
    for path in ("etc", "usr/local/bin", "home/user/.ssh"):
        (tmp_path / path).mkdir(parents=True)
    os.chmod(str(tmp_path), 0o755)
    for path in ("home/user", "home/user/.ssh"):
        os.chown(str(tmp_path / path), USER, USER)
    (tmp_path / "usr/local/bin/gpufleet-run-image").write_text("#!/bin/sh\n")
    (tmp_path / "etc/shadow").write_text("root:$y$secret:19000:0:99999:7:::\n")
    os.chmod(str(tmp_path / "etc/shadow"), 0o640)
    return tmp_path


def listing(root):
    """Owner, group, mode and bytes of everything under root, links not followed: what an attack must not change."""
    found = {}
    for directory, dirs, names in os.walk(str(root)):
        for name in dirs + names:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            data = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    data = handle.read()
            found[path] = (info.st_uid, info.st_gid, info.st_mode, data)
    return found


def test_a_root_owned_path_is_trusted(tree):
    assert untrusted_step(str(tree / "etc/nccl.conf")) is None
    assert untrusted_step(str(tree / "usr/local/bin/gpufleet-run-image")) is None
    # What does not exist yet is made inside a directory already checked.
    assert untrusted_step(str(tree / "etc/missing/deeper/file")) is None


def test_a_directory_another_account_owns_is_refused_below_it(tree):
    problem = untrusted_step(str(tree / "home/user/.ssh/authorized_keys"))
    assert problem is not None and str(tree / "home/user") in problem and "uid %d" % USER in problem
    assert "become_user" in problem
    # The directory itself may be chowned or chmodded: its parent, home/, is root's.
    assert untrusted_step(str(tree / "home/user"), follow_last=True) is None
    # As that account itself, its own directories are trusted.
    assert untrusted_step(str(tree / "home/user/.ssh/authorized_keys"), uid=USER) is None


@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o775, True), (0o757, True), (0o1777, False)])
def test_a_directory_others_may_write_is_refused_unless_sticky(tree, mode, refused):
    os.chmod(str(tree / "etc"), mode)
    problem = untrusted_step(str(tree / "etc/nccl.conf"))
    assert (problem is not None) is refused
    if refused:
        assert str(tree / "etc") in problem and "chmod go-w" in problem


def test_below_a_sticky_directory_each_step_is_checked_again(tree):
    os.chmod(str(tree / "etc"), 0o1777)
    (tree / "etc/theirs").mkdir()
    os.chown(str(tree / "etc/theirs"), USER, USER)
    assert untrusted_step(str(tree / "etc/theirs/file")) is not None
    (tree / "etc/ours").mkdir()
    assert untrusted_step(str(tree / "etc/ours/file")) is None


def test_a_users_dot_ssh_made_a_link_to_a_root_directory(tree):
    ssh = tree / "home/user/.ssh"
    os.rmdir(str(ssh))
    os.symlink(str(tree / "usr/local/bin"), str(ssh))
    os.lchown(str(ssh), USER, USER)
    # A file below it, and the directory item itself: refused at home/user already, which the user owns.
    for problem in (untrusted_step(str(ssh / "id_ed25519")), untrusted_step(str(ssh), follow_last=True)):
        assert problem is not None and str(tree / "home/user") in problem and "uid %d" % USER in problem
    # As the user, a file below it is the kernel's to allow or not; the directory item itself is refused, since a
    # directory gpufleet manages is followed only through a link root owns.
    assert untrusted_step(str(ssh / "id_ed25519"), uid=USER) is None
    problem = untrusted_step(str(ssh), uid=USER, follow_last=True)
    assert "remove the link" in problem and str(tree / "usr/local/bin") in problem


def test_a_link_another_account_owns_is_not_followed_at_the_end(tree):
    """A link a user could own in a root directory (made by a careless tool, say): a directory item follows its link,
    so the link must be root's; a file item replaces it and an absent item unlinks it, which is safe."""
    os.symlink(str(tree / "usr/local/bin"), str(tree / "etc/tool"))
    os.lchown(str(tree / "etc/tool"), USER, USER)
    problem = untrusted_step(str(tree / "etc/tool"), follow_last=True)
    assert problem is not None and "symbolic link" in problem and "uid %d" % USER in problem
    assert untrusted_step(str(tree / "etc/tool")) is None


def test_a_link_root_owns_is_followed_and_its_target_checked(tree):
    os.symlink(str(tree / "home/user"), str(tree / "etc/userdir"))
    problem = untrusted_step(str(tree / "etc/userdir/.ssh/config"))
    assert problem is not None and str(tree / "home/user") in problem
    os.symlink("../usr/local/bin", str(tree / "etc/bin"))  # relative, with ..
    assert untrusted_step(str(tree / "etc/bin/gpufleet-run-image")) is None
    assert untrusted_step(str(tree / "etc/bin"), follow_last=True) is None


def test_a_link_another_account_owns_is_not_followed_on_the_way(tree):
    os.symlink(str(tree / "usr/local/bin"), str(tree / "etc/planted"))
    os.lchown(str(tree / "etc/planted"), USER, USER)
    problem = untrusted_step(str(tree / "etc/planted/gpufleet-run-image"))
    assert problem is not None and "symbolic link" in problem


def test_a_loop_of_links_ends(tree):
    os.symlink(str(tree / "etc/b"), str(tree / "etc/a"))
    os.symlink(str(tree / "etc/a"), str(tree / "etc/b"))
    assert "too many symbolic links" in untrusted_step(str(tree / "etc/a/file"))


@pytest.fixture
def module_env(monkeypatch):
    from ansible.module_utils import _internal
    patch_module(monkeypatch, lambda *args, **kwargs: (0, "", ""))
    monkeypatch.setattr(_internal, "is_controller", False)


def test_managed_files_as_root_refuses_the_dot_ssh_link_and_changes_nothing(tree, module_env):
    """The attack of the issue: ~/.ssh replaced by a link to /usr/local/bin, then the key tasks run as root."""
    ssh = tree / "home/user/.ssh"
    os.rmdir(str(ssh))
    os.symlink(str(tree / "usr/local/bin"), str(ssh))
    os.lchown(str(ssh), USER, USER)
    before = listing(tree)
    items = [
        {"dest": str(ssh), "state": "directory", "owner": str(USER), "group": str(USER), "mode": "0700"},
        {"dest": str(ssh / "authorized_keys"), "content": "ssh-ed25519 AAAA cluster\n", "mode": "0600",
         "owner": str(USER)},
        {"dest": str(ssh / "id_ed25519.next"), "state": "absent"},
    ]
    with pytest.raises(Fail) as failure:
        run_main(managed_files.main, {"files": items})
    problems = failure.value.args[0]["problems"]
    assert len(problems) == 3 and all("symbolic link" in p or "become_user" in p for p in problems), problems
    assert listing(tree) == before


def test_managed_files_as_root_refuses_a_key_file_linked_to_shadow(tree, module_env):
    ssh = tree / "home/user/.ssh"
    os.symlink(str(tree / "etc/shadow"), str(ssh / "id_ed25519"))
    os.lchown(str(ssh / "id_ed25519"), USER, USER)
    before = listing(tree)
    with pytest.raises(Fail) as failure:
        run_main(managed_files.main, {"files": [{"dest": str(ssh / "id_ed25519"), "content": "key\n",
                                                 "owner": str(USER), "mode": "0600"}]})
    assert "become_user" in failure.value.args[0]["msg"]
    assert listing(tree) == before


def test_line_settings_refuses_a_file_below_a_users_directory(tree, module_env):
    (tree / "home/user/.profile").write_text("umask 022\n")
    before = listing(tree)
    with pytest.raises(Fail) as failure:
        run_main(line_settings.main, {"path": str(tree / "home/user/.profile"), "settings": {"umask": "077"}})
    assert "nothing was changed" in failure.value.args[0]["msg"]
    assert listing(tree) == before
