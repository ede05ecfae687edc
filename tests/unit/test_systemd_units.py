"""systemd_units: the plan from systemctl show outputs captured in a node container, and the module's calls."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import systemd_units as su
from ansible_collections.gpufleet.cluster.plugins.modules import systemd_units
from conftest import fixture_parts
from module_harness import Fail, patch_module, run_main

BASIC = fixture_parts("systemd", "show-trixie-ssh-nonexistent-journald.txt")[1]
RICH = fixture_parts("systemd", "show-trixie-alias-masked-timer-failed.txt")[1]
AFTER = fixture_parts("systemd", "show-trixie-after-enable-start.txt")[1]
TEMPLATE = fixture_parts("systemd", "show-trixie-template-name-rc1.txt")[1]
SINCE_UTC = fixture_parts("systemd", "show-trixie-since-utc.txt")[1]
SINCE_CET = fixture_parts("systemd", "show-trixie-since-local-cet.txt")[1]
SINCE_BOOKWORM = fixture_parts("systemd", "show-bookworm-since-utc.txt")[1]
NEED_RELOAD = fixture_parts("systemd", "show-trixie-need-daemon-reload.txt")[1]
# /etc/capture-demo.conf's mtime in that capture, written 1.5 s after capture-demo.service started.
NEED_RELOAD_CONF_MTIME = 1796625762.512792301
SINCE_NAMES = ["ssh.service", "nonexistent.service", "systemd-journald.service", "fstrim.service"]
TEMPLATE_STDERR = "Failed to get properties: Unit name sshd@.service is neither a valid invocation ID nor unit name.\n"


def blocks_of(text, indexes):
    """The captured output reduced to some of its blocks, as systemctl prints it for just those units."""
    blocks = text.rstrip("\n").split("\n\n")
    return "\n\n".join(blocks[index] for index in indexes) + "\n"


RICH_NAMES = ["ssh", "sshd.service", "dbus.service", "sudo.service", "debug-shell.service", "dpkg-db-backup.timer",
              "fstrim.timer", "getty@tty1.service", "capture-false.service", "nonexistent.timer"]
RICH_FOUND = blocks_of(RICH, range(9))  # all but nonexistent.timer


def test_parse_show_one_block_per_unit_in_order():
    blocks = su.parse_show(BASIC)
    assert [block["Id"] for block in blocks] == ["ssh.service", "nonexistent.service", "systemd-journald.service"]
    assert blocks[0] == {"Id": "ssh.service", "LoadState": "loaded", "ActiveState": "active",
                         "UnitFileState": "enabled"}
    assert blocks[1]["LoadState"] == "not-found" and blocks[1]["UnitFileState"] == ""
    assert blocks[2]["UnitFileState"] == "static"


def test_parse_show_rich_output():
    blocks = su.parse_show(RICH)
    assert len(blocks) == len(RICH_NAMES)
    assert [block["Id"] for block in blocks[:2]] == ["ssh.service", "ssh.service"]
    assert [(b["LoadState"], b["ActiveState"], b["UnitFileState"]) for b in blocks[3:9]] == [
        ("masked", "inactive", "masked"), ("loaded", "inactive", "disabled"), ("loaded", "active", "enabled"),
        ("loaded", "inactive", "enabled"), ("loaded", "inactive", "enabled"), ("loaded", "failed", "transient")]


def by_name(plans):
    return {item["name"]: item for item in plans}


def test_plan_asks_only_for_what_differs():
    units = [{"name": "ssh", "state": "started", "enabled": True},
             {"name": "sshd.service", "state": "started"},
             {"name": "dbus.service", "enabled": True},  # static: nothing enable could add
             {"name": "sudo.service", "state": "stopped", "enabled": False},  # masked: already off
             {"name": "debug-shell.service", "enabled": True},
             {"name": "dpkg-db-backup.timer", "state": "started", "enabled": True},
             {"name": "fstrim.timer", "state": "started", "enabled": True},
             {"name": "getty@tty1.service", "state": "stopped"},
             {"name": "capture-false.service", "state": "started"},
             {"name": "nonexistent.timer", "state": "stopped"}]
    plans, problems = su.plan(units, su.parse_show(RICH))
    # A unit that is not there is a problem even when it is only to be stopped: the caller named a unit the node lacks.
    assert problems == ["nonexistent.timer: no such unit (LoadState=not-found)"]
    plans = plans[:-1]
    actions = {item["name"]: item["actions"] for item in plans}
    assert actions == {"ssh": [], "sshd.service": [], "dbus.service": [], "sudo.service": [],
                       "debug-shell.service": ["enable"], "dpkg-db-backup.timer": [], "fstrim.timer": ["start"],
                       "getty@tty1.service": [], "capture-false.service": ["start"]}
    plans = by_name(plans)
    assert plans["fstrim.timer"]["before"] == {"active": "inactive", "enabled": "enabled"}
    assert plans["fstrim.timer"]["after"] == {"active": "active", "enabled": "enabled"}
    assert plans["debug-shell.service"]["after"] == {"active": "inactive", "enabled": "enabled"}
    assert plans["capture-false.service"]["before"]["active"] == "failed"
    assert plans["sshd.service"]["id"] == "ssh.service"


def test_plan_stops_and_disables():
    blocks = su.parse_show(BASIC)
    plans, problems = su.plan([{"name": "ssh.service", "state": "stopped", "enabled": False}], blocks[:1])
    assert problems == []
    assert plans[0]["actions"] == ["disable", "stop"]
    assert plans[0]["after"] == {"active": "inactive", "enabled": "disabled"}


def test_missing_unit_is_a_problem_naming_it():
    plans, problems = su.plan([{"name": "ssh.service", "state": "started"}, {"name": "nonexistent.service"},
                               {"name": "systemd-journald.service"}], su.parse_show(BASIC))
    assert problems == ["nonexistent.service: no such unit (LoadState=not-found)"]


@pytest.mark.parametrize("unit, problem", [
    ({"name": "sudo.service", "state": "started"}, "sudo.service: masked, so it can neither start nor be enabled"),
    ({"name": "sudo.service", "enabled": True}, "sudo.service: masked, so it can neither start nor be enabled"),
])
def test_masked_unit_cannot_start_or_be_enabled(unit, problem):
    blocks = su.parse_show(RICH)
    _plans, problems = su.plan([unit], [blocks[3]])
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_unit_file_states_enable_cannot_change_are_problems():
    transient = su.parse_show(RICH)[8]
    assert su.plan([{"name": "capture-false.service", "enabled": False}], [transient])[0][0]["actions"] == []
    unknown = dict(transient, UnitFileState="bad")
    assert su.plan([{"name": "x.service", "enabled": True}], [unknown])[1] == [
        "x.service: cannot be enabled (UnitFileState=bad)"]


def test_block_count_must_match():
    assert su.plan([{"name": "a"}, {"name": "b"}], su.parse_show(TEMPLATE))[1] == [
        "systemctl show answered for 1 unit(s), 2 were named"]


def test_name_problems():
    assert su.name_problems([{"name": "a.service"}, {"name": "ssh*"}, {"name": "a.service"}, {"name": ""},
                             {"name": "--now"}]) == [
        "ssh*: a pattern, not a unit name", "a.service: named twice", "a unit without a name", "--now: not a unit name"]


def test_diff_lists_only_changing_units():
    plans, _problems = su.plan([{"name": "ssh.service", "state": "started"},
                                {"name": "systemd-journald.service", "state": "stopped"}],
                               [su.parse_show(BASIC)[0], su.parse_show(BASIC)[2]])
    assert su.diff(plans) == {"before": {"systemd-journald.service": {"active": "active", "enabled": "static"}},
                              "after": {"systemd-journald.service": {"active": "inactive", "enabled": "static"}}}


# --- the module, run in-process with systemctl faked by the captured outputs

class FakeSystemctl(object):
    """Answers show with the captured text (then, after changes, with `after`), records every call."""

    def __init__(self, show, after=None, fail_on=None, show_rc=0, show_err=""):
        self.calls = []
        self.shows = [show] + ([after] if after is not None else [])
        self.fail_on = fail_on
        self.show_rc = show_rc
        self.show_err = show_err

    def run_command(self, module, args, **kwargs):
        # show prints its timestamps in UTC; every call speaks C.
        assert kwargs.get("environ_update") == dict({"LANGUAGE": "C", "LC_ALL": "C"},
                                                    **({"TZ": "UTC"} if args[1] == "show" else {}))
        self.calls.append(args[1:])
        if args[1] == "show":
            text = self.shows.pop(0) if len(self.shows) > 1 else self.shows[0]
            return self.show_rc, text, self.show_err
        if self.fail_on and args[1] == self.fail_on[0] and args[-1] == self.fail_on[1]:
            return 1, "", "Job for %s failed.\n" % args[-1]
        return 0, "", ""


def use(monkeypatch, fake):
    # A plain function: patch_module installs it as AnsibleModule.run_command, which a bound method cannot be.
    def run_command(module, args, **kwargs):
        return fake.run_command(module, args, **kwargs)

    patch_module(monkeypatch, run_command)


SHOW_ARGS = ["show", "--property=Id,LoadState,ActiveState,UnitFileState,ActiveEnterTimestamp,NeedDaemonReload", "--"]


def test_module_changes_nothing_when_all_agree(monkeypatch):
    fake = FakeSystemctl(BASIC)
    use(monkeypatch, fake)
    names = ["ssh.service", "nonexistent.service", "systemd-journald.service"]
    result = run_main(systemd_units.main, {"units": [
        {"name": "ssh.service", "state": "started", "enabled": True}, {"name": "nonexistent.service"},
        {"name": "systemd-journald.service", "state": "started", "enabled": True}]}, expect=Fail)
    assert fake.calls == [SHOW_ARGS + names]
    del names[1]
    fake = FakeSystemctl(blocks_of(BASIC, [0, 2]))
    use(monkeypatch, fake)
    result = run_main(systemd_units.main, {"units": [
        {"name": "ssh.service", "state": "started", "enabled": True},
        {"name": "systemd-journald.service", "state": "started", "enabled": True}]})
    assert result["changed"] is False
    assert fake.calls == [SHOW_ARGS + names]
    assert [unit["before"] for unit in result["units"]] == [unit["after"] for unit in result["units"]] == [
        {"active": "active", "enabled": "enabled"}, {"active": "active", "enabled": "static"}]


def test_module_runs_only_the_missing_calls_then_reads_again(monkeypatch):
    # Captured before and after `systemctl enable debug-shell.service` and `systemctl start fstrim.timer`.
    fake = FakeSystemctl(RICH_FOUND, after=AFTER)
    use(monkeypatch, fake)
    warnings = []
    monkeypatch.setattr(systemd_units.AnsibleModule, "warn", lambda module, text: warnings.append(text))
    units = [{"name": name} for name in RICH_NAMES[:-1]]
    units[0].update(state="started", enabled=True)  # ssh: already so
    units[4].update(enabled=True)  # debug-shell.service: disabled
    units[6].update(state="started")  # fstrim.timer: inactive
    result = run_main(systemd_units.main, {"units": units, "daemon_reload": True, "_ansible_diff": True})
    assert fake.calls == [["daemon-reload"], SHOW_ARGS + RICH_NAMES[:-1], ["enable", "--", "debug-shell.service"],
                          ["start", "--", "fstrim.timer"], SHOW_ARGS + RICH_NAMES[:-1]]
    assert result["changed"] is True
    units = {unit["name"]: unit for unit in result["units"]}
    assert [name for name, unit in units.items() if unit["changed"]] == ["debug-shell.service", "fstrim.timer"]
    assert units["debug-shell.service"]["after"] == {"active": "inactive", "enabled": "enabled"}
    # What systemd reports after the start, not what was asked for: the timer's condition fails in a container.
    assert units["fstrim.timer"]["after"] == {"active": "inactive", "enabled": "enabled"}
    assert warnings == ["fstrim.timer was started but systemd reports it inactive (a Condition may have failed, "
                        "or it ended)"]
    assert result["diff"] == {
        "before": {"debug-shell.service": {"active": "inactive", "enabled": "disabled"},
                   "fstrim.timer": {"active": "inactive", "enabled": "enabled"}},
        "after": {"debug-shell.service": {"active": "inactive", "enabled": "enabled"},
                  "fstrim.timer": {"active": "inactive", "enabled": "enabled"}}}


def test_module_check_mode_reports_and_changes_nothing(monkeypatch):
    fake = FakeSystemctl(RICH_FOUND)
    use(monkeypatch, fake)
    units = [{"name": name} for name in RICH_NAMES[:-1]]
    units[6].update(state="started", enabled=True)
    result = run_main(systemd_units.main, {"units": units, "daemon_reload": True, "_ansible_check_mode": True,
                                           "_ansible_diff": True})
    assert fake.calls == [SHOW_ARGS + RICH_NAMES[:-1]]  # no daemon-reload, no start
    assert result["changed"] is True
    assert result["diff"] == {"before": {"fstrim.timer": {"active": "inactive", "enabled": "enabled"}},
                              "after": {"fstrim.timer": {"active": "active", "enabled": "enabled"}}}


def test_module_fails_on_a_missing_unit_before_changing_any(monkeypatch):
    fake = FakeSystemctl(BASIC)
    use(monkeypatch, fake)
    result = run_main(systemd_units.main, {"units": [
        {"name": "ssh.service", "state": "stopped"}, {"name": "nonexistent.service", "state": "started"},
        {"name": "systemd-journald.service"}]}, expect=Fail)
    assert "nonexistent.service: no such unit" in result["msg"] and "Nothing was changed" in result["msg"]
    assert [(unit["changed"], unit["actions"]) for unit in result["units"]] == [(False, [])] * 3
    assert result["units"][0]["after"] == result["units"][0]["before"] == {"active": "active", "enabled": "enabled"}
    assert fake.calls == [SHOW_ARGS + ["ssh.service", "nonexistent.service", "systemd-journald.service"]]


def test_module_fails_with_what_systemctl_said(monkeypatch):
    fake = FakeSystemctl(TEMPLATE, show_rc=1, show_err=TEMPLATE_STDERR)
    use(monkeypatch, fake)
    result = run_main(systemd_units.main, {"units": [
        {"name": "ssh.service"}, {"name": "sshd@.service", "state": "started"}, {"name": "dbus.service"}]},
        expect=Fail)
    assert "sshd@.service is neither a valid invocation ID nor unit name" in result["msg"]
    assert "Nothing was changed" in result["msg"]
    assert len(fake.calls) == 1


def test_module_names_the_call_that_failed_and_what_ran_before(monkeypatch):
    fake = FakeSystemctl(RICH_FOUND)
    use(monkeypatch, fake)
    fake.fail_on = ("start", "capture-false.service")
    units = [{"name": name} for name in RICH_NAMES[:-1]]
    units[6].update(state="started")
    units[8].update(state="started")
    result = run_main(systemd_units.main, {"units": units}, expect=Fail)
    assert result["msg"].startswith("systemctl start capture-false.service failed (rc 1): Job for capture-false")
    assert "Done before it: start fstrim.timer." in result["msg"]
    assert result["changed"] is True
    assert [unit["name"] for unit in result["units"] if unit["changed"]] == ["fstrim.timer"]
    assert fake.calls[-1] == SHOW_ARGS + RICH_NAMES[:-1]  # the states reported are read after the failure


def test_module_refuses_patterns(monkeypatch):
    fake = FakeSystemctl(BASIC)
    use(monkeypatch, fake)
    result = run_main(systemd_units.main, {"units": [{"name": "ssh*", "state": "started"}]}, expect=Fail)
    assert "ssh*: a pattern" in result["msg"]
    assert fake.calls == []


# --- when a unit became active, and units that may be missing

def test_active_since_is_read_in_utc():
    # 2026-12-03 09:29:21 UTC and 09:29:03 UTC; never active and missing units have none.
    for text, ssh in ((SINCE_UTC, 1796290161), (SINCE_BOOKWORM, 1796290162)):
        plans, problems = su.plan([{"name": name, "missing_ok": True} for name in SINCE_NAMES], su.parse_show(text))
        assert problems == []
        assert [item["active_since"] for item in plans] == [ssh, None, 1796290143, None]
        assert [item["load"] for item in plans] == ["loaded", "not-found", "loaded", "loaded"]


def test_a_timestamp_in_another_zone_is_not_guessed():
    # The same moment printed in the node's own zone (CET): ambiguous abbreviations are not read.
    assert [su.epoch_of(block["ActiveEnterTimestamp"]) for block in su.parse_show(SINCE_CET)] == [None] * 4
    assert su.epoch_of("Thu 2026-12-03 09:29:21.123456 UTC") == 1796290161
    assert su.epoch_of("n/a") is None and su.epoch_of("garbage UTC x") is None


def test_missing_ok_only_spares_a_unit_that_is_only_read():
    blocks = su.parse_show(SINCE_UTC)[1:2]
    assert su.plan([{"name": "nonexistent.service", "missing_ok": True}], blocks)[1] == []
    for wanted in ({"state": "started"}, {"state": "stopped"}, {"enabled": False}):
        unit = dict({"name": "nonexistent.service", "missing_ok": True}, **wanted)
        assert su.plan([unit], blocks)[1] == ["nonexistent.service: no such unit (LoadState=not-found)"]


def test_module_reads_a_unit_that_may_be_missing(monkeypatch):
    fake = FakeSystemctl(SINCE_UTC)
    use(monkeypatch, fake)
    result = run_main(systemd_units.main, {"units": [{"name": name, "missing_ok": True} for name in SINCE_NAMES],
                                           "_ansible_check_mode": True})
    assert result["changed"] is False and fake.calls == [SHOW_ARGS + SINCE_NAMES]
    assert [(unit["load"], unit["before"]["active"], unit["active_since"]) for unit in result["units"]] == [
        ("loaded", "active", 1796290161), ("not-found", "inactive", None), ("loaded", "active", 1796290143),
        ("loaded", "inactive", None)]


# --- what a run stopped half-way leaves: a unit file not loaded, a configuration written after the service started

def test_a_service_started_before_its_files_were_written_is_restarted_and_only_then():
    blocks = su.parse_show(NEED_RELOAD)
    unit = {"name": "capture-demo.service", "state": "started"}
    # Written 1.5 s after the start: restart. Written in the second it started, before, or no file: nothing.
    assert su.plan([dict(unit, newest_mtime=NEED_RELOAD_CONF_MTIME)], blocks[:1])[0][0]["actions"] == ["restart"]
    for mtime in (1796625761.9, 1796625700.0, None):
        assert su.plan([dict(unit, newest_mtime=mtime)], blocks[:1])[0][0]["actions"] == []
    # Only a unit asked to run: one only read, or to be stopped, is not restarted.
    assert su.plan([{"name": "capture-demo.service", "newest_mtime": NEED_RELOAD_CONF_MTIME}], blocks[:1])[0][0][
        "actions"] == []
    assert su.needs_daemon_reload(blocks) and not su.needs_daemon_reload(blocks[1:])


def test_module_loads_a_unit_file_left_unloaded_and_restarts_a_stale_service(monkeypatch, tmp_path):
    conf = tmp_path / "capture-demo.conf"
    conf.write_text("written after the service started\n")
    os.utime(str(conf), (NEED_RELOAD_CONF_MTIME, NEED_RELOAD_CONF_MTIME))
    loaded = NEED_RELOAD.replace("NeedDaemonReload=yes", "NeedDaemonReload=no")
    fake = FakeSystemctl(NEED_RELOAD, after=loaded)
    fake.shows.append(loaded)
    use(monkeypatch, fake)
    names = ["capture-demo.service", "ssh.service"]
    units = [{"name": "capture-demo.service", "state": "started", "restart_when_newer": [str(conf), "/nonexistent"]},
             {"name": "ssh.service", "state": "started", "restart_when_newer": ["/nonexistent"]}]
    result = run_main(systemd_units.main, {"units": units})
    assert fake.calls == [SHOW_ARGS + names, ["daemon-reload"], SHOW_ARGS + names,
                          ["restart", "--", "capture-demo.service"], SHOW_ARGS + names]
    assert result["changed"] is True and result["daemon_reloaded"] is True
    assert [unit["actions"] for unit in result["units"]] == [["restart"], []]


def test_module_check_mode_reports_the_pending_reload_without_running_it(monkeypatch):
    fake = FakeSystemctl(NEED_RELOAD)
    use(monkeypatch, fake)
    names = ["capture-demo.service", "ssh.service"]
    result = run_main(systemd_units.main, {"units": [{"name": name} for name in names], "_ansible_check_mode": True})
    assert fake.calls == [SHOW_ARGS + names]
    assert result["changed"] is True and result["daemon_reloaded"] is True
    # Asked to reload anyway (a unit file written in this run): that reload is not reported as a repair.
    fake = FakeSystemctl(NEED_RELOAD.replace("NeedDaemonReload=yes", "NeedDaemonReload=no"))
    use(monkeypatch, fake)
    result = run_main(systemd_units.main, {"units": [{"name": name} for name in names], "daemon_reload": True})
    assert fake.calls == [["daemon-reload"], SHOW_ARGS + names]
    assert result["changed"] is False and result["daemon_reloaded"] is False
