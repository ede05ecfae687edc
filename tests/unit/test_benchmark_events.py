"""scripts/benchmark.py: per-task figures from ansible-runner's event stream (recorded events)."""
import json
import os
import sys

from conftest import ROOT, fixture_parts

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import benchmark  # noqa: E402  (scripts/ is not a package)


def events():
    _unused, body = fixture_parts("runner-events", "two-plays.jsonl")
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def rows_by_name():
    return {row["name"]: row for row in benchmark.task_rows(events())}


def test_one_row_per_task_with_every_host():
    rows = rows_by_name()
    assert sorted(rows) == sorted([
        "Sleep a little, longer on b", "Skip on every host", "Include a task file", "Included ping",
        "Ping under strategy free", "Change only on a"])
    assert all(row["hosts"] == 2 for row in rows.values())


def test_seconds_are_the_slowest_hosts():
    rows = rows_by_name()
    durations = {}
    for event in events():
        data = event["event_data"]
        durations.setdefault(data["task"], []).append(data["duration"])
    for name, row in rows.items():
        assert row["seconds"] == max(durations[name])
    # sleep 0.6 on b, 0.1 on a: b's result is the row's
    sleep = [e["event_data"] for e in events() if e["event_data"]["task"] == "Sleep a little, longer on b"]
    assert rows["Sleep a little, longer on b"]["seconds"] == next(d["duration"] for d in sleep if d["host"] == "b")


def test_changed_and_skipped_counts():
    rows = rows_by_name()
    assert rows["Sleep a little, longer on b"]["changed"] == 2
    assert rows["Change only on a"]["changed"] == 1
    assert rows["Ping under strategy free"]["changed"] == 0
    assert rows["Skip on every host"]["skipped"] is True
    assert rows["Included ping"]["skipped"] is False


def test_actions_and_package_split():
    rows = benchmark.task_rows(events())
    by_name = {row["name"]: row for row in rows}
    assert by_name["Include a task file"]["action"] == "ansible.builtin.include_tasks"
    assert by_name["Change only on a"]["action"] == "ansible.builtin.command"
    packages, rest = benchmark.split_packages(rows)
    assert packages == 0
    assert abs(rest - sum(row["seconds"] for row in rows)) < 1e-9


def test_summary_line(capsys):
    rows = benchmark.task_rows(events())
    figures = benchmark.summarize("2 node(s) no-op re-run", 12.0, rows, controller=3.0, nodes=None, node_count=2)
    out = capsys.readouterr().out
    assert figures == {"seconds": 12.0, "tasks": 6, "executions": 12, "changed": 3, "cpu": 3.0, "controller": 3.0,
                       "controller_per_node": 1.5, "nodes_per_node": None}
    assert "tasks    6  task-host runs    12  tasks/s   0.50  changed 3" in out
    assert "CPU: controller 3.0s (1.5s per node), nodes n/a;" in out


def test_summary_line_with_node_cpu_and_idle_load(capsys):
    rows = benchmark.task_rows(events())
    figures = benchmark.summarize("2 node(s) no-op re-run", 10.0, rows, controller=4.0, nodes=6.0, node_count=2,
                                  idle=0.1)
    out = capsys.readouterr().out
    assert figures["nodes_per_node"] == 3.0 and figures["cpu"] == 10.0
    assert "nodes 6.0s (3.0s per node, of which 0.5s their services' idle load)" in out


def role_events():
    _unused, body = fixture_parts("runner-events", "role-play.jsonl")
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def test_node_round_trips_leave_out_skips_controller_actions_and_delegation():
    trips = {}
    for event in role_events():
        data = event["event_data"]
        trips.setdefault(data["task"], set()).add(
            0 if event["event"] == "runner_on_skipped" else benchmark.node_round_trips(data))
    assert trips == {
        "Remember a value": {0},                          # set_fact
        "Run a command on the node": {1},
        "Run a command per item, one item skipped": {1},  # one item ran, one was skipped
        "Run on the controller": {0},                     # delegated to localhost
        "Skip on every host": {0},
        "Check the value": {0},                           # assert
        "Ping outside the role": {1},
    }


def test_role_rows_count_results_skips_and_round_trips_per_role():
    rows = benchmark.role_rows(role_events())
    assert [row["role"] for row in rows] == ["demo", "(play)"]
    demo, play = rows
    assert (demo["results"], demo["skipped"], demo["round_trips"]) == (12, 2, 4)
    assert (play["results"], play["skipped"], play["round_trips"]) == (2, 0, 2)
    assert demo["seconds"] > 0


def test_role_lines_per_node(capsys):
    benchmark.print_roles(benchmark.role_rows(role_events()), node_count=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["demo", "6.0", "(", "1.0)", "2.0", lines[1].split()[-1]]
    assert lines[-1].split() == ["all", "7.0", "(", "1.0)", "3.0"]
