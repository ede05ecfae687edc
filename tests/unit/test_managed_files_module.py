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
    patch_module(monkeypatch, fake_validator)
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
        {"dest": str(jail), "changed": True, "checksum": sha1("[sshd]\nenabled = true\n")},
        {"dest": str(sshd), "changed": True, "checksum": sha1("PasswordAuthentication no\n")},
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
    ([{"dest": "/etc/a"}], "needs exactly one of src and content"),
    ([{"dest": "/etc/a", "src": "a.j2", "content": "x"}], "needs exactly one of src and content"),
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
    assert mf.item_problems([{"src": "a.j2", "dest": "/etc/a", "mode": "0644", "diff": False},
                             {"content": "", "dest": "/etc/b", "validate": "true %s"}]) == []
    assert mf.item_problems([{"dest": "/etc/a", "src": "a.j2"}], rendered=True) != []


def test_large_and_binary_contents_are_not_put_into_the_diff(tmp_path):
    dest = str(tmp_path / "big")
    with open(dest, "wb") as handle:
        handle.write(b"\xff\xfe binary")
    entry = mf.content_diff(dest, mf.inspect(dest, b"x" * (mf.MAX_DIFF_BYTES + 1)), b"x" * (mf.MAX_DIFF_BYTES + 1))
    assert "not UTF-8 text" in entry["before"] and "larger than" in entry["after"]
