"""gpufleet.cluster.managed_files (the module, on the node) and its pure checks, on files under tmp_path."""
import hashlib
import json
import os
import shlex

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import managed_files as mf
from ansible_collections.gpufleet.cluster.plugins.modules import managed_files
from module_harness import Fail, patch_module, run_main

SECRET = "web_password_hash: $2b$12$Q0WxkaHFOPKxJ0Ylp.Ei8eVhPazpWQ7m2HFQV8hQ3mfoAUx8BXpAa\n"


def fake_validator(module, args, **kwargs):
    """The `validate` commands of these tests: "check-file %s" fails when the candidate holds the word BROKEN.
    It also records the candidate's path and mode, which the module must have set before validating."""
    argv = shlex.split(args) if isinstance(args, str) else list(args)
    assert argv[0] == "check-file", argv
    path = argv[1]
    fake_validator.seen.append((path, oct(os.stat(path).st_mode & 0o7777)))
    with open(path) as handle:
        text = handle.read()
    return (1, "", "BROKEN on line 1 of %s" % path) if "BROKEN" in text else (0, "", "")


@pytest.fixture
def node(tmp_path, monkeypatch):
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings
    patch_module(monkeypatch, fake_validator)
    # A module's warnings go to the result as on a node, not to the controller's display (which other tests of the
    # suite turn on by importing controller code); each test sees its own alone.
    monkeypatch.setattr(_internal, "is_controller", False)
    warnings._global_warnings.clear()
    fake_validator.seen = []
    root = tmp_path / "etc"
    (root / "fail2ban").mkdir(parents=True)
    (root / "ssh").mkdir()
    return root


def files(node, **changes):
    base = [
        {"dest": str(node / "fail2ban" / "jail.local"), "content": "[sshd]\nenabled = true\n", "mode": "0644"},
        {"dest": str(node / "ssh" / "gpufleet.conf"), "content": "PasswordAuthentication no\n", "mode": "0600",
         "validate": "check-file %s"},
    ]
    for index, change in changes.items():
        base[int(index[1:])].update(change)
    return base


def run(items, check=False, diff=False, expect=None):
    args = {"files": items, "_ansible_check_mode": check, "_ansible_diff": diff}
    return run_main(managed_files.main, args, **({"expect": expect} if expect else {}))


def snapshot(root):
    """Every file under root with its bytes, mode and mtime: what "nothing was written" compares."""
    found = {}
    for directory, dummy, names in os.walk(str(root)):
        for name in names:
            path = os.path.join(directory, name)
            st = os.stat(path)
            with open(path, "rb") as handle:
                found[path] = (handle.read(), st.st_mode & 0o7777, st.st_mtime_ns)
    return found


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def test_first_run_creates_every_file_with_its_mode(node):
    result = run(files(node))
    jail, sshd = node / "fail2ban" / "jail.local", node / "ssh" / "gpufleet.conf"
    assert result["changed"] is True
    assert result["changed_files"] == [str(jail), str(sshd)]
    assert jail.read_text() == "[sshd]\nenabled = true\n" and sshd.read_text() == "PasswordAuthentication no\n"
    assert oct(jail.stat().st_mode & 0o777) == "0o644" and oct(sshd.stat().st_mode & 0o777) == "0o600"
    assert result["files"] == [
        {"dest": str(jail), "state": "file", "changed": True, "checksum": sha1("[sshd]\nenabled = true\n")},
        {"dest": str(sshd), "state": "file", "changed": True, "checksum": sha1("PasswordAuthentication no\n")},
    ]
    # The candidate was validated in the destination directory, already with its mode, and is gone now.
    (candidate, mode), = fake_validator.seen
    assert os.path.dirname(candidate) == str(node / "ssh") and os.path.basename(candidate).startswith(".")
    assert mode == "0o600" and not os.path.exists(candidate)
    assert sorted(os.listdir(str(node / "ssh"))) == ["gpufleet.conf"]


def test_second_run_changes_nothing_and_writes_nothing(node):
    run(files(node))
    before = snapshot(node)
    fake_validator.seen = []
    result = run(files(node), diff=True)
    assert result["changed"] is False and result["changed_files"] == [] and result["diff"] == []
    assert [f["changed"] for f in result["files"]] == [False, False]
    assert snapshot(node) == before  # same bytes, modes and mtimes
    assert fake_validator.seen == []  # nothing to validate when nothing changes


def test_content_drift_is_repaired_and_only_that_file_is_written(node):
    run(files(node))
    jail, sshd = node / "fail2ban" / "jail.local", node / "ssh" / "gpufleet.conf"
    jail.write_text("[sshd]\nenabled = false\n")
    sshd_mtime = sshd.stat().st_mtime_ns
    result = run(files(node), diff=True)
    assert result["changed_files"] == [str(jail)]
    assert jail.read_text() == "[sshd]\nenabled = true\n"
    assert sshd.stat().st_mtime_ns == sshd_mtime
    assert result["diff"] == [{"before": "[sshd]\nenabled = false\n", "after": "[sshd]\nenabled = true\n",
                               "before_header": str(jail), "after_header": str(jail)}]


def test_mode_drift_is_repaired_without_rewriting_the_content(node):
    run(files(node))
    sshd = node / "ssh" / "gpufleet.conf"
    os.chmod(str(sshd), 0o644)
    inode = sshd.stat().st_ino
    fake_validator.seen = []
    result = run(files(node), diff=True)
    assert result["changed_files"] == [str(sshd)]
    assert oct(sshd.stat().st_mode & 0o777) == "0o600"
    assert sshd.stat().st_ino == inode and fake_validator.seen == []  # not replaced, not validated again
    header = "%s (owner, group, mode)" % sshd
    assert result["diff"] == [{"before": {"mode": "0644"}, "after": {"mode": "0600"},
                               "before_header": header, "after_header": header}]


def test_check_mode_writes_nothing_and_reports_every_change_with_its_diff(node):
    run(files(node))
    jail, sshd = node / "fail2ban" / "jail.local", node / "ssh" / "gpufleet.conf"
    jail.write_text("drifted\n")
    os.chmod(str(sshd), 0o640)
    new = {"dest": str(node / "fail2ban" / "filter.local"), "content": "[Definition]\n", "mode": "0644"}
    before = snapshot(node)
    fake_validator.seen = []
    result = run(files(node) + [new], check=True, diff=True)
    assert snapshot(node) == before and fake_validator.seen == []
    assert result["changed"] is True
    assert result["changed_files"] == [str(jail), str(sshd), new["dest"]]
    header = "%s (owner, group, mode)" % sshd
    assert result["diff"] == [
        {"before": "drifted\n", "after": "[sshd]\nenabled = true\n", "before_header": str(jail),
         "after_header": str(jail)},
        {"before": {"mode": "0640"}, "after": {"mode": "0600"}, "before_header": header, "after_header": header},
        {"before": "", "after": "[Definition]\n", "before_header": new["dest"], "after_header": new["dest"]},
    ]


def test_check_mode_without_diff_returns_no_diff(node):
    result = run(files(node), check=True)
    assert result["changed"] is True and "diff" not in result
    assert snapshot(node) == {}


def test_a_failed_validation_writes_no_file_at_all(node):
    run(files(node))
    before = snapshot(node)
    items = files(node, f0={"content": "[sshd]\nenabled = false\n"}, f1={"content": "BROKEN\n"})
    result = run(items, expect=Fail)
    assert snapshot(node) == before  # the valid jail change was not written either
    assert "validation failed for %s" % items[1]["dest"] in result["msg"]
    assert "nothing was written" in result["msg"]
    assert result["validation"][0]["rc"] == 1 and "BROKEN" in result["validation"][0]["stderr"]
    # No candidate is left behind in the destination directories.
    assert sorted(os.listdir(str(node / "ssh"))) == ["gpufleet.conf"]
    assert sorted(os.listdir(str(node / "fail2ban"))) == ["jail.local"]


def test_a_missing_directory_fails_naming_the_file_and_writes_nothing(node):
    missing = str(node / "nftables.d" / "gpufleet.nft")
    result = run(files(node) + [{"dest": missing, "content": "table inet gpufleet {}\n"}], expect=Fail)
    assert missing in result["msg"] and str(node / "nftables.d") in result["msg"]
    assert "nothing was written" in result["msg"]
    assert snapshot(node) == {}  # the two files whose directories exist were not written either
    assert fake_validator.seen == []


def test_check_mode_counts_a_file_in_a_missing_directory_as_changed_and_warns(node, monkeypatch):
    from ansible.module_utils import basic
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, warning, **kwargs: warnings.append(warning))
    missing = str(node / "nftables.d" / "gpufleet.nft")
    result = run([{"dest": missing, "content": "table inet gpufleet {}\n"}], check=True)
    assert result["changed_files"] == [missing]
    assert len(warnings) == 1 and missing in warnings[0] and "does not exist" in warnings[0]
    assert not os.path.exists(str(node / "nftables.d"))


def test_diff_false_keeps_the_content_out_of_every_result(node):
    dest = node / "fail2ban" / "web.yml"
    dest.write_text("web_password_hash: old-hash-value\n")
    os.chmod(str(dest), 0o640)
    items = [{"dest": str(dest), "content": SECRET, "mode": "0640", "diff": False}]
    result = run(items, diff=True)
    assert dest.read_text() == SECRET
    assert result["diff"] == [{"before": "(content hidden: diff is false for this file)\n",
                               "after": "(new content hidden: diff is false for this file)\n",
                               "before_header": str(dest), "after_header": str(dest)}]
    text = json.dumps(result)
    assert "$2b$12$" not in text and "old-hash-value" not in text
    assert result["invocation"]["module_args"]["files"][0]["content"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_contents_shown_in_diffs_are_still_masked_in_the_invocation(node):
    result = run(files(node), diff=True)
    assert result["diff"][0]["after"] == "[sshd]\nenabled = true\n"  # not masked where diff shows it
    assert [f["content"] for f in result["invocation"]["module_args"]["files"]] == [
        "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"] * 2


def test_a_failure_masks_every_content(node):
    items = files(node, f1={"content": "BROKEN secret-token-value\n"})
    result = run(items, expect=Fail)
    assert "secret-token-value" not in json.dumps(result)


def test_unknown_owner_fails_before_anything_is_written(node):
    result = run(files(node, f0={"owner": "no-such-user-gpufleet"}), expect=Fail)
    assert "no such user no-such-user-gpufleet" in result["msg"]
    assert snapshot(node) == {}


def test_an_empty_list_changes_nothing(node):
    result = run([], diff=True)
    assert result["changed"] is False and result["files"] == [] and result["diff"] == []


def test_a_symbolic_link_is_replaced_by_a_file(node):
    target = node / "ssh" / "elsewhere"
    target.write_text("[sshd]\nenabled = true\n")
    link = node / "fail2ban" / "jail.local"
    os.symlink(str(target), str(link))
    result = run(files(node)[:1], diff=True)
    assert result["changed_files"] == [str(link)]
    assert not link.is_symlink() and link.read_text() == "[sshd]\nenabled = true\n"
    assert target.read_text() == "[sshd]\nenabled = true\n"
    assert "symbolic link" in result["diff"][0]["before"]


def test_a_new_file_without_mode_gets_the_umask_mode_and_an_existing_one_keeps_its_own(node):
    old = os.umask(0o022)
    try:
        plain = node / "fail2ban" / "plain.local"
        run([{"dest": str(plain), "content": "a\n"}])
        assert oct(plain.stat().st_mode & 0o777) == "0o644"
        os.chmod(str(plain), 0o600)
        run([{"dest": str(plain), "content": "b\n"}])
        assert plain.read_text() == "b\n" and oct(plain.stat().st_mode & 0o777) == "0o600"
    finally:
        os.umask(old)


@pytest.mark.parametrize("items, problem", [
    ("not a list", "files must be a list"),
    ([{"content": "x"}], "files[0] has no dest"),
    ([{"dest": "/etc/a"}], "needs exactly one of src, content and copy"),
    ([{"dest": "/etc/a", "src": "a.j2", "content": "x"}], "needs exactly one of src, content and copy"),
    ([{"dest": "/etc/a", "copy": "a.yml", "content": "x"}], "needs exactly one of src, content and copy"),
    ([{"dest": "/etc/a", "content_base64": "eA=="}], "unknown keys content_base64"),
    ([{"dest": "etc/a", "content": "x"}], "must be an absolute path"),
    ([{"dest": "/etc/a", "state": "link"}], "state must be one of file, directory, absent"),
    ([{"dest": "/etc/d", "state": "directory", "content": "x"}], "state directory takes no content"),
    ([{"dest": "/etc/d", "state": "directory", "validate": "true %s"}], "state directory takes no validate"),
    ([{"dest": "/etc/a", "state": "absent", "mode": "0644"}], "state absent takes no mode"),
    ([{"dest": "/etc/a", "state": "absent", "copy": "a"}], "state absent takes no copy"),
    ([{"dest": "/", "state": "absent"}], "/ cannot be a file or be removed"),
    ([{"dest": "/etc/d", "state": "absent"}, {"dest": "/etc/d/a", "content": "x"}],
     "files[1] (/etc/d/a) lies inside /etc/d, which files[0] removes"),
    ([{"dest": "/etc/d/e", "state": "directory"}, {"dest": "/etc/d/", "state": "absent"}],
     "files[0] (/etc/d/e) lies inside /etc/d, which files[1] removes"),
    ([{"dest": "/etc/d", "state": "directory"}, {"dest": "/etc/d/", "state": "directory"}], "the same dest as files[0]"),
    ([{"dest": "/etc/a", "content": "x"}, {"dest": "/etc/./a", "content": "y"}], "the same dest as files[0]"),
    ([{"dest": "/etc/a", "content": "x", "validate": "sshd -t"}], "validate must contain %s"),
    ([{"dest": "/etc/a", "content": "x", "mode": "rw-r--r--"}], "neither octal nor symbolic"),
    ([{"dest": "/etc/a", "content": "x", "notify": "y"}], "unknown keys notify"),
    ([{"dest": "/etc/", "content": "x"}], "must name a file"),
])
def test_item_problems_name_what_is_wrong(items, problem):
    problems = mf.item_problems(items)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("mode", ["0644", "644", "0600", 0o644, "u=rw,g=r,o=", "a+r", "u+x,g-w"])
def test_usable_modes_pass(mode):
    assert mf.mode_problem(mode) is None


def test_a_valid_list_has_no_problems():
    assert mf.item_problems([{"dest": "/etc/d", "state": "directory", "mode": "0755", "owner": "root"},
                             {"src": "a.j2", "dest": "/etc/d/a", "mode": "0644", "diff": False},
                             {"content": "", "dest": "/etc/b", "validate": "true %s"},
                             {"copy": "rules.yml", "dest": "/etc/d/rules.yml", "state": "file"},
                             {"dest": "/etc/dold", "state": "absent"}]) == []
    assert mf.item_problems([{"dest": "/etc/a", "content_base64": "eA=="}], rendered=True) == []
    assert mf.item_problems([{"dest": "/etc/a", "src": "a.j2"}], rendered=True) != []
    assert mf.item_problems([{"dest": "/etc/a", "copy": "a"}], rendered=True) != []
    assert mf.item_problems([{"dest": "/etc/a", "content": "x", "content_base64": "eA=="}], rendered=True) != []


def test_large_and_binary_contents_are_not_put_into_the_diff(tmp_path):
    dest = str(tmp_path / "big")
    with open(dest, "wb") as handle:
        handle.write(b"\xff\xfe binary")
    entry = mf.content_diff(dest, mf.inspect(dest, b"x" * (mf.MAX_DIFF_BYTES + 1)), b"x" * (mf.MAX_DIFF_BYTES + 1))
    assert "not UTF-8 text" in entry["before"] and "larger than" in entry["after"]


# Directories, removals and copied bytes.

def test_a_directory_and_the_files_in_it_are_made_in_one_call(node):
    new = node / "prometheus" / "rules"
    items = [{"dest": str(node / "prometheus"), "state": "directory", "mode": "0755"},
             {"dest": str(new), "state": "directory", "mode": "0750"},
             {"dest": str(new / "a.yml"), "content": "groups: []\n", "mode": "0644", "validate": "check-file %s"}]
    result = run(items, diff=True)
    assert result["changed_files"] == [str(node / "prometheus"), str(new), str(new / "a.yml")]
    assert oct(new.stat().st_mode & 0o7777) == "0o750" and (new / "a.yml").read_text() == "groups: []\n"
    assert [f["state"] for f in result["files"]] == ["directory", "directory", "file"]
    assert "checksum" not in result["files"][0] and result["files"][2]["checksum"] == sha1("groups: []\n")
    # The candidate was validated inside the new directory.
    assert os.path.dirname(fake_validator.seen[0][0]) == str(new)
    assert result["diff"][:2] == [
        {"before": {"path": str(node / "prometheus"), "state": "absent"},
         "after": {"path": str(node / "prometheus"), "state": "directory", "mode": "0755"},
         "before_header": str(node / "prometheus"), "after_header": str(node / "prometheus")},
        {"before": {"path": str(new), "state": "absent"},
         "after": {"path": str(new), "state": "directory", "mode": "0750"},
         "before_header": str(new), "after_header": str(new)},
    ]
    # Second run: nothing changes, nothing is written.
    before = snapshot(node)
    again = run(items, diff=True)
    assert again["changed"] is False and again["changed_files"] == [] and again["diff"] == []
    assert snapshot(node) == before


def test_an_existing_directory_with_other_attributes_is_fixed(node):
    target = node / "exporters"
    target.mkdir()
    os.chmod(str(target), 0o777)
    inode = target.stat().st_ino
    result = run([{"dest": str(target), "state": "directory", "mode": "0755"}], diff=True)
    assert result["changed_files"] == [str(target)]
    assert oct(target.stat().st_mode & 0o7777) == "0o755" and target.stat().st_ino == inode
    header = "%s (owner, group, mode)" % target
    assert result["diff"] == [{"before": {"mode": "0777"}, "after": {"mode": "0755"},
                               "before_header": header, "after_header": header}]
    assert run([{"dest": str(target), "state": "directory", "mode": "0755"}])["changed"] is False


def test_a_directory_item_without_attributes_leaves_an_existing_one_as_it_is(node):
    os.chmod(str(node / "ssh"), 0o700)
    result = run([{"dest": str(node / "ssh"), "state": "directory"}])
    assert result["changed"] is False and oct((node / "ssh").stat().st_mode & 0o7777) == "0o700"


def test_check_mode_reports_a_new_directory_and_a_fix_and_changes_nothing(node):
    os.chmod(str(node / "ssh"), 0o777)
    new = node / "prometheus"
    items = [{"dest": str(new), "state": "directory", "mode": "0755"},
             {"dest": str(node / "ssh"), "state": "directory", "mode": "0755"}]
    result = run(items, check=True, diff=True)
    assert result["changed_files"] == [str(new), str(node / "ssh")]
    assert not new.exists() and oct((node / "ssh").stat().st_mode & 0o7777) == "0o777"
    assert result["diff"][0]["after"] == {"path": str(new), "state": "directory", "mode": "0755"}
    assert result["diff"][1]["before"] == {"mode": "0777"} and result["diff"][1]["after"] == {"mode": "0755"}


def test_check_mode_counts_a_file_in_a_new_directory_item_as_there_without_warning(node):
    from ansible.module_utils.common.warnings import get_warning_messages
    new = node / "prometheus" / "rules"
    items = [{"dest": str(node / "prometheus"), "state": "directory"},
             {"dest": str(new), "state": "directory"},
             {"dest": str(new / "a.yml"), "content": "groups: []\n", "mode": "0644"}]
    result = run(items, check=True, diff=True)
    assert result["changed_files"] == [str(node / "prometheus"), str(new), str(new / "a.yml")]
    assert not any("does not exist" in warning for warning in get_warning_messages())
    assert result["diff"][2] == {"before": "", "after": "groups: []\n", "before_header": str(new / "a.yml"),
                                 "after_header": str(new / "a.yml")}
    assert not (node / "prometheus").exists()


def test_a_directory_listed_after_its_file_does_not_count(node):
    new = node / "prometheus"
    items = [{"dest": str(new / "a.yml"), "content": "x\n"}, {"dest": str(new), "state": "directory"}]
    result = run(items, expect=Fail)
    assert "the directory of %s, %s, does not exist" % (new / "a.yml", new) in result["msg"]
    assert not new.exists()


def test_a_directory_whose_parent_is_missing_fails_and_warns_in_check_mode(node):
    from ansible.module_utils.common.warnings import get_warning_messages
    deep = node / "a" / "b"
    result = run([{"dest": str(deep), "state": "directory"}], expect=Fail)
    assert str(node / "a") in result["msg"] and not (node / "a").exists()
    checked = run([{"dest": str(deep), "state": "directory"}], check=True)
    assert checked["changed_files"] == [str(deep)]
    assert any("parent of the directory" in warning for warning in get_warning_messages())


def test_a_file_in_the_way_of_a_directory_fails_and_nothing_is_changed(node):
    (node / "ssh" / "conf.d").write_text("not a directory\n")
    items = [{"dest": str(node / "fail2ban" / "jail.local"), "content": "x\n"},
             {"dest": str(node / "ssh" / "conf.d"), "state": "directory"}]
    before = snapshot(node)
    result = run(items, expect=Fail)
    assert "%s exists and is not a directory" % (node / "ssh" / "conf.d") in result["msg"]
    assert snapshot(node) == before


def test_a_failed_validation_removes_the_directories_made_for_the_candidates(node):
    new = node / "sudoers.d"
    items = [{"dest": str(new), "state": "directory", "mode": "0750"},
             {"dest": str(new / "gpufleet"), "content": "BROKEN\n", "validate": "check-file %s"}]
    result = run(items, expect=Fail)
    assert "validation failed" in result["msg"] and not new.exists()


def test_absent_removes_a_file_a_link_and_a_tree_and_reports_only_what_was_there(node):
    tree = node / "exporters"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "tls.key").write_text("key\n")
    target = node / "ssh" / "kept"
    target.write_text("kept\n")
    link = node / "ssh" / "link"
    os.symlink(str(target), str(link))
    plain = node / "fail2ban" / "old.local"
    plain.write_text("old\n")
    nothing = node / "fail2ban" / "never-there"
    items = [{"dest": str(p), "state": "absent"} for p in (tree, link, plain, nothing)]
    result = run(items, diff=True)
    assert result["changed_files"] == [str(tree), str(link), str(plain)]
    assert not tree.exists() and not os.path.lexists(str(link)) and not plain.exists()
    assert target.read_text() == "kept\n"  # a link is removed, not what it points to
    assert [f["changed"] for f in result["files"]] == [True, True, True, False]
    assert [(d["before"]["state"], d["after"]["state"]) for d in result["diff"]] == [
        ("directory", "absent"), ("link", "absent"), ("file", "absent")]
    again = run(items, diff=True)
    assert again["changed"] is False and again["diff"] == []


def test_check_mode_reports_a_removal_and_removes_nothing(node):
    (node / "ssh" / "id_ed25519.next").write_text("key\n")
    before = snapshot(node)
    items = [{"dest": str(node / "ssh" / "id_ed25519.next"), "state": "absent"},
             {"dest": str(node / "ssh" / "gone"), "state": "absent"},
             {"dest": str(node / "fail2ban"), "state": "absent"}]
    result = run(items, check=True, diff=True)
    assert result["changed_files"] == [str(node / "ssh" / "id_ed25519.next"), str(node / "fail2ban")]
    assert snapshot(node) == before and (node / "fail2ban").is_dir()


def test_a_problem_with_one_item_keeps_removals_and_directories_from_happening(node):
    old = node / "fail2ban" / "old.local"
    old.write_text("old\n")
    items = [{"dest": str(node / "new"), "state": "directory"},
             {"dest": str(old), "state": "absent"},
             {"dest": str(node / "ssh" / "x"), "content": "x\n", "owner": "no-such-user-gpufleet"}]
    result = run(items, expect=Fail)
    assert "no such user" in result["msg"]
    assert old.exists() and not (node / "new").exists()


def test_content_base64_writes_the_bytes_as_they_are(node):
    import base64
    data = b"\x00\xff binary {{ $labels.instance }}\n"
    dest = node / "fail2ban" / "blob"
    items = [{"dest": str(dest), "content_base64": base64.b64encode(data).decode(), "mode": "0644"}]
    result = run(items, diff=True)
    assert dest.read_bytes() == data
    assert result["files"][0]["checksum"] == hashlib.sha1(data).hexdigest()
    assert "not UTF-8 text" in result["diff"][0]["after"]
    assert result["invocation"]["module_args"]["files"][0]["content_base64"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert run(items)["changed"] is False


# settled: the action plugin's reading on the controller, which stands in for a module run only when nothing differs.

def settled_set(node):
    """A directory, a file in it, a file with an owner and group, and a path to remove: all as asked after one run."""
    items = [{"dest": str(node / "prometheus"), "state": "directory", "mode": "0755"},
             {"dest": str(node / "prometheus" / "targets.json"), "content": "[]\n", "mode": "0644"},
             {"dest": str(node / "ssh" / "gpufleet.conf"), "content": "PasswordAuthentication no\n", "mode": 0o600,
              "owner": "root", "group": "0"},
             {"dest": str(node / "fail2ban" / "old.local"), "state": "absent"}]
    run([dict(item) for item in items])
    return items


def test_settled_gives_the_module_s_own_per_item_results_when_nothing_differs(node):
    items = settled_set(node)
    module_result = run([dict(item) for item in items], check=True)
    assert module_result["changed"] is False
    assert mf.settled(items) == module_result["files"]


def drift_content(node):
    (node / "prometheus" / "targets.json").write_text("[{}]\n")


def drift_file_mode(node):
    os.chmod(str(node / "ssh" / "gpufleet.conf"), 0o644)


def drift_directory_mode(node):
    os.chmod(str(node / "prometheus"), 0o700)


def drift_owner(node):
    os.chown(str(node / "ssh" / "gpufleet.conf"), 1, -1)


def drift_group(node):
    os.chown(str(node / "ssh" / "gpufleet.conf"), -1, 1)


def drift_removed_path_back(node):
    (node / "fail2ban" / "old.local").write_text("back\n")


def drift_file_gone(node):
    (node / "prometheus" / "targets.json").unlink()


def drift_file_is_a_link(node):
    """A link to a file with the very same bytes and mode: the module replaces it by a file."""
    target = node / "elsewhere.json"
    target.write_text("[]\n")
    os.chmod(str(target), 0o644)
    (node / "prometheus" / "targets.json").unlink()
    os.symlink(str(target), str(node / "prometheus" / "targets.json"))


@pytest.mark.parametrize("drift", [drift_content, drift_file_mode, drift_directory_mode, drift_owner, drift_group,
                                   drift_removed_path_back, drift_file_gone, drift_file_is_a_link])
def test_settled_never_stands_in_for_a_run_that_would_change_something(node, drift):
    items = settled_set(node)
    drift(node)
    assert run([dict(item) for item in items], check=True)["changed"] is True  # the module would change it
    assert mf.settled(items) is None


@pytest.mark.parametrize("change", [
    {"mode": "u=rw,g=r,o=r"},                     # symbolic: the module's own reading
    {"owner": "no-such-user-here"},               # the module fails on it
    {"dest": "~/targets.json"},                   # expanded by the module
    {"diff": "maybe"},                            # refused by the module's argument spec
], ids=["symbolic mode", "unknown owner", "tilde", "bad diff"])
def test_settled_leaves_what_it_cannot_judge_to_the_module(node, change):
    items = settled_set(node)
    items[1].update(change)
    assert mf.settled(items) is None


def test_settled_counts_a_link_to_a_directory_for_the_module_to_judge(node):
    items = settled_set(node)
    os.rename(str(node / "prometheus"), str(node / "real-prometheus"))
    os.symlink(str(node / "real-prometheus"), str(node / "prometheus"))
    assert mf.settled(items) is None


def test_settled_changes_nothing(node):
    items = settled_set(node)
    drift_content(node)
    before = snapshot(node)
    assert mf.settled(items) is None and mf.settled(items[:1]) is not None
    assert snapshot(node) == before


def test_the_node_log_names_destinations_and_never_contents(node, monkeypatch):
    """ansible-core passes the task's no_log (off by default) in place of the module's no_log=True, and masks a
    no_log suboption only where its value shows verbatim: the "Invoked with" line must name the items alone."""
    from ansible.module_utils import basic
    logged = []
    monkeypatch.setattr(basic.AnsibleModule, "log", lambda module, msg, log_args=None: logged.append((msg, log_args)))
    items = files(node, i0={"content": SECRET + "second line\n", "diff": False})
    with_task_no_log_off = {"files": items, "_ansible_no_log": False}
    run_main(managed_files.main, with_task_no_log_off)
    text = repr(logged)
    assert "web_password_hash" not in text and "second line" not in text and "PasswordAuthentication" not in text
    assert logged[0][0] == "Invoked with files: %s (file), %s (file)" % (items[0]["dest"], items[1]["dest"])
