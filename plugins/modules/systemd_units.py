#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: systemd_units
short_description: Bring several systemd units to their states in one call
version_added: "0.1.0"
description:
  - Reads the state of every unit given with one
    C(systemctl show --property=Id,LoadState,ActiveState,UnitFileState,ActiveEnterTimestamp,NeedDaemonReload),
    then runs C(systemctl enable)/C(disable) and C(start)/C(stop) only for the units that differ, in the order given
    (enable or disable first, then start or stop, as M(ansible.builtin.systemd_service) does).
  - Repairs what a run stopped half-way leaves, so the next run finishes it. A unit file written without the
    C(daemon-reload) that should follow (systemd's C(NeedDaemonReload=yes) for a unit given) makes the module reload
    once; a running service whose files were written after it started (O(units[].restart_when_newer)) is
    restarted.
  - Written here because M(ansible.builtin.systemd_service) takes one unit per call, so a run that changes nothing
    still costs one module round trip per unit; a role's units are checked here in one.
  - A unit that does not exist (C(LoadState=not-found)), is masked while it should start or be enabled, or could not
    be loaded fails the task naming it, before anything is changed for any unit; a unit only read with
    O(units[].missing_ok) is reported with RV(units[].load) C(not-found) instead.
  - A unit counts as started when its C(ActiveState) is C(active), C(activating), C(reloading) or C(refreshing); as
    enabled when its C(UnitFileState) is C(enabled) or a state C(systemctl enable) cannot change (C(static),
    C(generated), C(transient), C(indirect), C(alias)).
options:
  units:
    description:
      - The units and the states to bring them to. A unit with neither O(units[].state) nor O(units[].enabled) is
        only read.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Unit name as systemctl takes it (C(ssh), C(ssh.service), C(dailyaidecheck.timer)); no patterns.
        type: str
        required: true
      state:
        description:
          - C(started) starts the unit unless it runs; C(stopped) stops it if it runs. Omitted leaves it as it is.
        type: str
        choices: [started, stopped]
      enabled:
        description:
          - Whether the unit starts at boot. Omitted leaves it as it is.
        type: bool
      restart_when_newer:
        description:
          - Files the unit reads at start (its configuration). A unit to be started that already runs is restarted
            when one of them was modified after it became active (whole seconds), as when a run wrote them and was
            stopped before its handler restarted the unit. Files that do not exist are left out.
        type: list
        elements: path
        default: []
      missing_ok:
        description:
          - For a unit with neither O(units[].state) nor O(units[].enabled), report a unit that does not exist (for
            instance before its package is installed) instead of failing.
        type: bool
        default: false
  daemon_reload:
    description:
      - Run C(systemctl daemon-reload) before reading the states, so unit files written earlier in the play are
        loaded. Not run in check mode; never reported as a change.
    type: bool
    default: false
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode (reads, changes nothing, reports what would change) and diff mode (the before and after
    C(active)/C(enabled) states of the units that change).
  - Needs systemd running as PID 1 (on a host or in a container that boots it).
"""

EXAMPLES = r"""
- name: Start the hardening timers and keep them on at boot
  gpufleet.cluster.systemd_units:
    units:
      - {name: dailyaidecheck.timer, state: started, enabled: true}
      - {name: chkrootkit.timer, state: started, enabled: true}
      - {name: sysstat-collect.timer, state: started, enabled: true}

- name: Enable a unit written in this play and start it only where the GPU is
  gpufleet.cluster.systemd_units:
    daemon_reload: true
    units:
      - name: nvidia-persistenced.service
        enabled: true
        state: "{{ 'started' if gpu_present else omit }}"
"""

RETURN = r"""
daemon_reloaded:
  description:
    - Whether systemd had a unit file of a unit given that changed on disk and was not loaded, and the module ran
      C(systemctl daemon-reload) for it (in check mode, would run it). Not set by O(daemon_reload).
  returned: always
  type: bool
units:
  description: One entry per unit, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The name as given.
      type: str
    id:
      description: The unit systemd resolved it to (C(ssh) and C(sshd.service) are both C(ssh.service) on Debian).
      type: str
    load:
      description: Its C(LoadState) as first read (C(loaded), C(not-found), C(masked)...).
      type: str
    active_since:
      description:
        - When the unit last became active (C(ActiveEnterTimestamp)), in seconds since the epoch, as first read;
          null if it has not been active since boot. Compare it with a file's C(mtime) to tell whether the running
          service started before the file was written.
      type: int
    changed:
      description: Whether this unit was (in check mode, would be) enabled, disabled, started, stopped or restarted.
      type: bool
    before:
      description: C(active) (ActiveState) and C(enabled) (UnitFileState) as systemd reported them first.
      type: dict
    after:
      description: The same after the changes, as systemd reports them then; in check mode, what they would be.
      type: dict
    actions:
      description: The systemctl verbs run (in check mode, that would run), in order.
      type: list
      elements: str
  sample:
    - {name: chkrootkit.timer, id: chkrootkit.timer, load: loaded, active_since: null, changed: true,
       actions: [enable, start], before: {active: inactive, enabled: disabled},
       after: {active: active, enabled: enabled}}
    - {name: ssh, id: ssh.service, load: loaded, active_since: 1796289761, changed: false, actions: [],
       before: {active: active, enabled: enabled}, after: {active: active, enabled: enabled}}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import systemd_units as su

C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}
# systemctl show prints timestamps in the zone of its environment: UTC, so su.epoch_of can read them.
SHOW_ENVIRONMENT = dict(C_LOCALE, TZ="UTC")


def show(module, systemctl, names):
    """(rc, out, err) of one systemctl show of all the units."""
    return module.run_command(
        [systemctl, "show", "--property=" + ",".join(su.SHOW_PROPERTIES), "--"] + names,
        environ_update=SHOW_ENVIRONMENT)


def result_units(plans, after_blocks=None, done=None):
    """The units as returned. ``done``: the actions that ran for each unit (default: all planned ones, i.e. check
    mode or success); ``after_blocks``: systemd's state after them (default: the states predicted by the plan)."""
    units = []
    for index, item in enumerate(plans):
        actions = item["actions"] if done is None else done.get(item["name"], [])
        if after_blocks:
            after = su.state_of(after_blocks[index])
        else:
            after = item["after"] if done is None else item["before"]
        units.append({"name": item["name"], "id": item["id"], "load": item["load"],
                      "active_since": item["active_since"], "changed": bool(actions),
                      "before": item["before"], "after": after, "actions": actions})
    return units


def read_after(module, systemctl, names, count):
    """Show blocks after changes, or None (with a warning) when systemctl cannot answer for every unit."""
    rc, out, _err = show(module, systemctl, names)
    blocks = su.parse_show(out) if rc == 0 else []
    if len(blocks) != count:
        module.warn("systemctl show could not be read after the changes: the after states are not systemd's")
        return None
    return blocks


def newest_mtime(paths):
    """The newest modification time of the files that exist among ``paths``; None when none does."""
    times = []
    for path in paths:
        try:
            times.append(os.stat(path).st_mtime)
        except OSError:
            continue
    return max(times) if times else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                state=dict(type="str", choices=["started", "stopped"]),
                enabled=dict(type="bool"),
                missing_ok=dict(type="bool", default=False),
                restart_when_newer=dict(type="list", elements="path", default=[]),
            )),
            daemon_reload=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    units = module.params["units"]
    problems = su.name_problems(units)
    if problems:
        module.fail_json(msg="; ".join(problems) + ". Nothing was changed.")
    systemctl = module.get_bin_path("systemctl", required=True)

    if module.params["daemon_reload"] and not module.check_mode:
        rc, out, err = module.run_command([systemctl, "daemon-reload"], environ_update=C_LOCALE)
        if rc != 0:
            module.fail_json(msg="systemctl daemon-reload failed (rc %d): %s" % (rc, (err or out).strip()))

    names = [unit["name"] for unit in units]
    blocks = []
    reload_pending = False
    if names:
        rc, out, err = show(module, systemctl, names)
        if rc != 0:
            module.fail_json(msg="systemctl show failed (rc %d): %s. Nothing was changed." % (
                rc, (err or out).strip()), rc=rc, stdout=out, stderr=err)
        blocks = su.parse_show(out)
        # A unit file changed on disk and never loaded (a run stopped between writing it and the daemon-reload).
        if su.needs_daemon_reload(blocks) and not module.params["daemon_reload"]:
            reload_pending = True
            if not module.check_mode:
                rc, out, err = module.run_command([systemctl, "daemon-reload"], environ_update=C_LOCALE)
                if rc != 0:
                    module.fail_json(msg="systemctl daemon-reload failed (rc %d): %s" % (rc, (err or out).strip()))
                rc, out, err = show(module, systemctl, names)
                if rc != 0:
                    module.fail_json(msg="systemctl show failed (rc %d): %s" % (rc, (err or out).strip()),
                                     changed=True)
                blocks = su.parse_show(out)
    for unit in units:
        unit["newest_mtime"] = newest_mtime(unit.get("restart_when_newer") or [])
    plans, problems = su.plan(units, blocks)
    if problems:
        module.fail_json(msg="; ".join(problems) + ". Nothing was changed.",
                         units=result_units(plans, done={}))

    changed = any(item["actions"] for item in plans) or reload_pending
    after_blocks = None
    if any(item["actions"] for item in plans) and not module.check_mode:
        done = {}
        for item in plans:
            for action in item["actions"]:
                rc, out, err = module.run_command([systemctl, action, "--", item["name"]], environ_update=C_LOCALE)
                if rc != 0:
                    ran = ["%s %s" % (verb, name) for name, verbs in done.items() for verb in verbs]
                    module.fail_json(
                        msg="systemctl %s %s failed (rc %d): %s. Done before it: %s." % (
                            action, item["name"], rc, (err or out).strip(), ", ".join(ran) or "nothing"),
                        changed=bool(ran),
                        units=result_units(plans, read_after(module, systemctl, names, len(plans)), done))
                done.setdefault(item["name"], []).append(action)
        # Report the states systemd has now (a started service may already have failed), not the ones asked for.
        after_blocks = read_after(module, systemctl, names, len(plans))
        for item, block in zip(plans, after_blocks or []):
            if "start" in item["actions"] and block.get("ActiveState") not in su.RUNNING:
                module.warn("%s was started but systemd reports it %s (a Condition may have failed, or it ended)"
                            % (item["name"], block.get("ActiveState")))

    result = dict(changed=changed, units=result_units(plans, after_blocks), daemon_reloaded=reload_pending)
    if module._diff:
        result["diff"] = su.diff(result["units"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
