"""gpufleet.cluster.line_settings against ansible.builtin.lineinfile: the same files from one call as from a loop.

The files are Debian's own (tests/fixtures/config-files/, their sources in their headers): /etc/login.defs, whose
comment lines also match the login regexp, chkrootkit.conf, /etc/default/debsums and aide.conf.
"""
import os

import pytest
from ansible.modules import lineinfile

from ansible_collections.gpufleet.cluster.plugins.module_utils import line_settings as ls
from ansible_collections.gpufleet.cluster.plugins.modules import line_settings
from conftest import fixture_parts
from module_harness import Fail, patch_exits, run_main

LOGIN_REGEXP, LOGIN_LINE = r"^\s*#?\s*{key}\s", "{key}\t{value}"
# os_hardening's defaults (roles/os_hardening/defaults/main.yml).
LOGIN = {"SHA_CRYPT_MIN_ROUNDS": 65536, "SHA_CRYPT_MAX_ROUNDS": 262144, "YESCRYPT_COST_FACTOR": 8,
         "PASS_MIN_DAYS": 1, "UMASK": "027"}
CHKROOTKIT = {"RUN_DAILY": "true", "RUN_DAILY_OPTS": "-q", "DIFF_MODE": "true"}


@pytest.fixture(autouse=True)
def module_exits(monkeypatch):
    patch_exits(monkeypatch)


def lineinfile_loop(path, settings, regexp, line):
    """What the role did before: one lineinfile call per key."""
    changed = False
    for key, value in settings.items():
        result = run_main(lineinfile.main, {"path": path, "regexp": regexp.replace("{key}", key),
                                            "line": line.replace("{key}", key).replace("{value}", str(value))})
        changed = changed or result["changed"]
    return changed


CASES = [
    ("login.defs-debian12", LOGIN, LOGIN_REGEXP, LOGIN_LINE),
    ("chkrootkit.conf-debian12", CHKROOTKIT, "^{key}=", '{key}="{value}"'),
    ("login.defs-debian12", {"UMASK": "077", "NEW_KEY": "x"}, LOGIN_REGEXP, LOGIN_LINE),
    # os_hardening's debsums schedule and AIDE digests (package_tools.yml, file_integrity.yml).
    ("debsums-debian12", {"CRON_CHECK": "weekly"}, "^{key}=", "{key}={value}"),
    ("aide.conf-debian12", {"Checksums": "sha256+sha512"}, r"^{key}\s*=", "{key} = {value}"),
]


@pytest.mark.parametrize("name, settings, regexp, line", CASES)
def test_one_call_writes_what_the_lineinfile_loop_wrote(tmp_path, name, settings, regexp, line, ):
    shipped = fixture_parts("config-files", name)[1]
    by_loop, by_module = tmp_path / "loop", tmp_path / "module"
    by_loop.write_text(shipped)
    by_module.write_text(shipped)
    loop_changed = lineinfile_loop(str(by_loop), settings, regexp, line)
    result = run_main(line_settings.main, {"path": str(by_module), "settings": settings, "regexp": regexp,
                                           "line": line})
    assert by_module.read_text() == by_loop.read_text()
    assert result["changed"] is loop_changed is True
    # The second run changes nothing, for both.
    assert lineinfile_loop(str(by_loop), settings, regexp, line) is False
    again = run_main(line_settings.main, {"path": str(by_module), "settings": settings, "regexp": regexp,
                                          "line": line})
    assert again["changed"] is False and again["lines"] == []


def test_login_defs_lines_are_set_where_debian_has_them():
    shipped = fixture_parts("config-files", "login.defs-debian12")[1]
    text, changed = ls.apply(shipped, ls.expand(LOGIN, LOGIN_REGEXP, LOGIN_LINE))
    assert "UMASK\t027\n" in text and "UMASK\t\t022" not in text
    assert "SHA_CRYPT_MIN_ROUNDS\t65536\n" in text and "#SHA_CRYPT_MIN_ROUNDS 5000" not in text
    assert len(changed) == 5 and len(text.splitlines()) == len(shipped.splitlines())


def test_check_mode_and_diff_change_nothing(tmp_path):
    path = tmp_path / "chkrootkit.conf"
    path.write_text(fixture_parts("config-files", "chkrootkit.conf-debian12")[1])
    path.chmod(0o640)
    before = path.read_text()
    result = run_main(line_settings.main, {"path": str(path), "settings": CHKROOTKIT, "line": '{key}="{value}"',
                                           "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and result["lines"] == ['RUN_DAILY_OPTS="-q"']
    assert result["diff"]["before"] == before and 'RUN_DAILY_OPTS="-q"' in result["diff"]["after"]
    assert path.read_text() == before
    run_main(line_settings.main, {"path": str(path), "settings": CHKROOTKIT, "line": '{key}="{value}"'})
    assert 'RUN_DAILY_OPTS="-q"\n' in path.read_text() and oct(os.stat(str(path)).st_mode & 0o777) == "0o640"
    assert [p.name for p in tmp_path.iterdir()] == ["chkrootkit.conf"]  # no temporary file left


def test_a_missing_file_fails_and_creates_nothing(tmp_path):
    failed = run_main(line_settings.main, {"path": str(tmp_path / "absent.conf"), "settings": {"A": 1}},
                      expect=Fail)
    assert "does not exist" in failed["msg"] and not (tmp_path / "absent.conf").exists()


@pytest.mark.parametrize("settings, regexp, line, message", [
    ({"A": 1}, "^A=", "{key}={value}", "regexp must contain {key}"),
    ({"A": 1}, "^{key}=", "{key}=", "line must contain {key} and {value}"),
    ({"A": "1\nB=2"}, "^{key}=", "{key}={value}", "neither may span lines"),
    ({"A": 1}, "^({key}=", "{key}={value}", "does not compile"),
])
def test_settings_that_cannot_make_a_line_are_refused(tmp_path, settings, regexp, line, message):
    path = tmp_path / "f.conf"
    path.write_text("A=0\n")
    failed = run_main(line_settings.main, {"path": str(path), "settings": settings, "regexp": regexp, "line": line},
                      expect=Fail)
    assert message in failed["msg"] and path.read_text() == "A=0\n"


def test_a_key_is_matched_literally_and_a_file_without_a_final_newline_gets_one():
    text, changed = ls.apply("A.B=1\nAxB=2", ls.expand({"A.B": 3, "C": True}, "^{key}=", "{key}={value}"))
    assert text == "A.B=3\nAxB=2\nC=true\n" and changed == ["A.B=3", "C=true"]


# os_hardening's tools and login settings, as its one call gives them (roles/os_hardening/tasks/tools.yml).
FILES = [
    ("login.defs-debian12", LOGIN, LOGIN_REGEXP, LOGIN_LINE),
    ("chkrootkit.conf-debian12", CHKROOTKIT, "^{key}=", '{key}="{value}"'),
    ("debsums-debian12", {"CRON_CHECK": "weekly"}, "^{key}=", "{key}={value}"),
    ("aide.conf-debian12", {"Checksums": "sha256+sha512"}, r"^{key}\s*=", "{key} = {value}"),
]


def shipped_files(directory):
    """The Debian files of FILES written under ``directory``; returns the module's ``files`` for them."""
    files = []
    for name, settings, regexp, line in FILES:
        path = directory / name
        path.write_text(fixture_parts("config-files", name)[1])
        files.append({"path": str(path), "settings": settings, "regexp": regexp, "line": line})
    return files


def test_files_in_one_call_are_written_as_one_call_per_file_writes_them(tmp_path):
    (tmp_path / "many").mkdir()
    (tmp_path / "each").mkdir()
    many, each = shipped_files(tmp_path / "many"), shipped_files(tmp_path / "each")
    result = run_main(line_settings.main, {"files": many})
    for spec in each:
        run_main(line_settings.main, spec)
    for one, other in zip(many, each):
        with open(one["path"]) as a, open(other["path"]) as b:
            assert a.read() == b.read()
    assert result["changed"] is True and result["changed_paths"] == [spec["path"] for spec in many]
    again = run_main(line_settings.main, {"files": many})
    assert again["changed"] is False and again["changed_paths"] == [] and again["lines"] == []


def test_files_report_each_changed_file_in_check_mode_and_write_none(tmp_path):
    files = shipped_files(tmp_path)
    run_main(line_settings.main, {"files": files[:2]})  # login.defs and chkrootkit.conf already set
    before = {spec["path"]: open(spec["path"]).read() for spec in files}
    result = run_main(line_settings.main, {"files": files, "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and result["changed_paths"] == [files[2]["path"], files[3]["path"]]
    assert [d["after_header"] for d in result["diff"]] == result["changed_paths"]
    assert "CRON_CHECK=weekly" in result["diff"][0]["after"] and "CRON_CHECK=weekly" not in result["diff"][0]["before"]
    assert {spec["path"]: open(spec["path"]).read() for spec in files} == before


def test_a_missing_file_among_files_fails_before_any_is_written(tmp_path):
    files = shipped_files(tmp_path)
    before = {spec["path"]: open(spec["path"]).read() for spec in files}
    files.append({"path": str(tmp_path / "absent.conf"), "settings": {"A": 1}, "regexp": "^{key}=",
                  "line": "{key}={value}"})
    failed = run_main(line_settings.main, {"files": files}, expect=Fail)
    assert "absent.conf does not exist" in failed["msg"] and "nothing was changed" in failed["msg"]
    assert {spec["path"]: open(spec["path"]).read() for spec in files[:-1]} == before


def test_a_file_named_twice_is_refused(tmp_path):
    path = tmp_path / "f.conf"
    path.write_text("A=0\n")
    failed = run_main(line_settings.main, {"files": [{"path": str(path), "settings": {"A": 1}},
                                                     {"path": str(path), "settings": {"A": 2}}]}, expect=Fail)
    assert "more than once" in failed["msg"] and path.read_text() == "A=0\n"


@pytest.mark.parametrize("args", [
    {"path": "/etc/x", "settings": {"A": 1}, "files": [{"path": "/etc/y", "settings": {"A": 1}}]},
    {"path": "/etc/x"},
    {"settings": {"A": 1}},
])
def test_path_and_files_are_one_or_the_other(args):
    failed = run_main(line_settings.main, args, expect=Fail)
    assert "mutually exclusive" in failed["msg"] or "required" in failed["msg"]
