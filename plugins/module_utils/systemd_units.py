# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What ``gpufleet.cluster.systemd_units`` has to do, from one ``systemctl show``: pure functions.

The module asks ``systemctl show --property=Id,LoadState,ActiveState,UnitFileState,ActiveEnterTimestamp,NeedDaemonReload
-- unit...``
(with ``TZ=UTC``) once for every unit it is given, hands the text to ``parse_show`` and ``plan``, and runs only the
``systemctl`` calls the plan lists.
``tests/unit/test_systemd_units.py`` runs them on outputs captured in a node container. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import time

SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "ActiveEnterTimestamp", "NeedDaemonReload")
# The module runs systemctl with TZ=UTC, so a timestamp reads "Thu 2026-12-03 09:29:21 UTC" whatever the node's zone.
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"

# ActiveState values in which the unit counts as started (as ansible.builtin.systemd_service counts them, plus the
# reload states), and the one in which a stop is still worth asking for.
RUNNING = ("active", "activating", "reloading", "refreshing")
DEACTIVATING = "deactivating"

# UnitFileState values that already satisfy enabled: true / enabled: false. A static, generated or transient unit has
# no [Install] section that enable/disable could act on; an indirect one is enabled through the units its Also= names;
# a masked one cannot start at boot.
ENABLED_ALREADY = ("enabled", "static", "generated", "transient", "indirect", "alias")
DISABLED_ALREADY = ("disabled", "static", "generated", "transient", "indirect", "masked", "masked-runtime")
# UnitFileState values systemctl enable / disable can change.
CAN_ENABLE = ("disabled", "enabled-runtime", "linked", "linked-runtime")
CAN_DISABLE = ("enabled", "enabled-runtime", "linked", "linked-runtime", "alias")

GLOB_CHARACTERS = "*?["


def parse_show(text):
    """``systemctl show`` of several units -> one {property: value} dict per unit, in the order they were named
    (systemctl prints one block per unit, blocks separated by an empty line)."""
    blocks = []
    current = {}
    for line in (text or "").splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


def name_problems(units):
    """Problems with the request itself (before systemd is asked): missing or duplicate names, glob patterns."""
    problems = []
    seen = set()
    for unit in units:
        name = unit.get("name") or ""
        if not name.strip():
            problems.append("a unit without a name")
        elif any(char in name for char in GLOB_CHARACTERS):
            problems.append("%s: a pattern, not a unit name" % name)
        elif name.startswith("-"):
            problems.append("%s: not a unit name" % name)
        elif name in seen:
            problems.append("%s: named twice" % name)
        seen.add(name)
    return problems


def epoch_of(timestamp):
    """Seconds since the epoch of a systemd timestamp printed in UTC ("Thu 2026-12-03 09:29:21 UTC", fractions of a
    second dropped); None for an empty one (never happened since boot), "n/a", or one in another zone."""
    parts = (timestamp or "").split()
    if len(parts) < 3 or parts[-1] != "UTC":
        return None
    try:
        moment = time.strptime("%s %s" % (parts[-3], parts[-2].split(".")[0]), TIMESTAMP_FORMAT)
    except ValueError:
        return None
    return calendar.timegm(moment)


def stale(newest_mtime, active_since):
    """Whether a running unit started before the newest of its files was written (a run that wrote them and was
    stopped before it restarted the unit). Whole seconds on both sides, as systemd prints the start: a file written
    in the second the unit started does not count, so a restart in the second after a write is never repeated."""
    return newest_mtime is not None and active_since is not None and int(newest_mtime) > active_since


def needs_daemon_reload(blocks):
    """Whether systemd says a unit file of one of these units changed on disk since it was last loaded."""
    return any(block.get("NeedDaemonReload") == "yes" for block in blocks)


def state_of(block):
    """{active, enabled}: the ActiveState and the UnitFileState systemd reports."""
    return {"active": block.get("ActiveState", ""), "enabled": block.get("UnitFileState", "")}


def plan_unit(unit, block):
    """(actions, predicted after-state, problem or None) for one requested unit and its show block.

    Actions are systemctl verbs in the order they run: enable/disable first, then start/stop (as systemd_service
    does), or restart for a running unit with ``newest_mtime`` (the newest mtime of its ``restart_when_newer`` files)
    later than its start. A problem means nothing may run for any unit."""
    name = unit["name"]
    load = block.get("LoadState", "")
    before = state_of(block)
    after = dict(before)
    actions = []
    wanted_state = unit.get("state")
    wanted_enabled = unit.get("enabled")
    if load == "not-found":
        if unit.get("missing_ok") and wanted_state is None and wanted_enabled is None:
            return [], after, None
        return [], after, "%s: no such unit (LoadState=not-found)" % name
    if load == "masked" and (wanted_state == "started" or wanted_enabled is True):
        return [], after, "%s: masked, so it can neither start nor be enabled (systemctl unmask it first)" % name
    if load not in ("loaded", "masked"):
        return [], after, "%s: systemd could not load it (LoadState=%s; see systemctl status %s)" % (name, load, name)
    unit_file = before["enabled"]
    if wanted_enabled is True and unit_file not in ENABLED_ALREADY:
        if unit_file not in CAN_ENABLE:
            return [], after, "%s: cannot be enabled (UnitFileState=%s)" % (name, unit_file or "empty")
        actions.append("enable")
        after["enabled"] = "enabled"
    elif wanted_enabled is False and unit_file not in DISABLED_ALREADY:
        if unit_file not in CAN_DISABLE:
            return [], after, "%s: cannot be disabled (UnitFileState=%s)" % (name, unit_file or "empty")
        actions.append("disable")
        after["enabled"] = "disabled"
    if wanted_state == "started" and before["active"] not in RUNNING:
        actions.append("start")
        after["active"] = "active"
    elif wanted_state == "started" and stale(unit.get("newest_mtime"), epoch_of(block.get("ActiveEnterTimestamp"))):
        actions.append("restart")
    elif wanted_state == "stopped" and (before["active"] in RUNNING or before["active"] == DEACTIVATING):
        actions.append("stop")
        after["active"] = "inactive"
    return actions, after, None


def plan(units, blocks):
    """(per-unit plans, problems) for the requested units and the show blocks in the same order.

    Each plan: {name, id, load, active_since, before, after (predicted), actions}; ``load`` is the LoadState and
    ``active_since`` the epoch second the unit last became active (None if it has not since boot), both as read
    before any change. Problems name every unit that stops the run."""
    if len(blocks) != len(units):
        return [], ["systemctl show answered for %d unit(s), %d were named" % (len(blocks), len(units))]
    plans = []
    problems = []
    for unit, block in zip(units, blocks):
        actions, after, problem = plan_unit(unit, block)
        if problem:
            problems.append(problem)
        plans.append({"name": unit["name"], "id": block.get("Id", unit["name"]), "load": block.get("LoadState", ""),
                      "active_since": epoch_of(block.get("ActiveEnterTimestamp")), "before": state_of(block),
                      "after": after, "actions": actions})
    return plans, problems


def diff(plans):
    """Ansible's diff: before/after {unit: {active, enabled}} of the units that change."""
    changed = [item for item in plans if item["actions"]]
    return {"before": dict((item["name"], item["before"]) for item in changed),
            "after": dict((item["name"], item["after"]) for item in changed)}
