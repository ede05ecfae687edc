#!/usr/bin/env python3
"""No-op run figures for site.yml on the lab: 1 node, then 4 nodes.

    python scripts/benchmark.py [--nodes-small 1] [--nodes-large 4] [--keep]

Prints, for each fleet size: the first converge (wall time, split into package download/install tasks and the
rest), the no-op re-run (wall time, task count, tasks per second, changed count), the ten slowest no-op tasks,
the large/small ratio, and the floor: a playbook of the same number of ansible.builtin.ping tasks on one node.
This is a measurement, not a test: it asserts nothing and always tears the lab down at the end (unless --keep).

The playbooks run through ansible-runner (scripts/lab.py's run_playbook); the per-task figures come from its
event stream: every task result (runner_on_ok, _failed, _skipped, _unreachable) carries its host, its task's
place in the source and its start, end and duration.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import lab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = [sys.executable, os.path.join(ROOT, "scripts", "lab.py")]
PACKAGE_ACTIONS = {"ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf", "apt", "package", "dnf",
                   "ansible.builtin.apt_repository", "ansible.builtin.deb822_repository"}


CPU = {}  # figures of the last run_events: controller and node CPU seconds


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def node_cpu_seconds():
    """CPU seconds the lab node containers have used so far (cgroup v1 cpuacct or v2 cpu.stat), or None."""
    names = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", "label=gpufleet.lab"],
                           capture_output=True, check=False, text=True).stdout.split()
    total, found = 0.0, False
    for cid in names:
        for path, scale, key in (
                ("/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage" % cid, 1e-9, None),
                ("/sys/fs/cgroup/cpu,cpuacct/docker/%s/cpuacct.usage" % cid, 1e-9, None),
                ("/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat" % cid, 1e-6, "usage_usec"),
                ("/sys/fs/cgroup/docker/%s/cpu.stat" % cid, 1e-6, "usage_usec")):
            try:
                with open(path) as handle:
                    text = handle.read()
            except OSError:
                continue
            if key:
                text = next((line.split()[1] for line in text.splitlines() if line.startswith(key + " ")), "0")
            total += int(text.strip()) * scale
            found = True
            break
    return total if found else None


RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")


def run_events(playbook, *extra):
    """Run a playbook quietly through ansible-runner; return (seconds, its task-result events).

    CPU gets the controller's CPU seconds (ansible-playbook, its forks and ssh) and the nodes' (their
    containers' cgroups) for the run."""
    events = []

    def keep(event):
        if event.get("event") in RESULT_EVENTS:
            events.append(event)

    cpu_before, nodes_before = _children_cpu(), node_cpu_seconds()
    started = time.monotonic()
    rc, stats = lab.run_playbook(playbook, *extra, quiet=True, on_event=keep)
    seconds = time.monotonic() - started
    nodes_after = node_cpu_seconds()
    CPU.clear()
    CPU.update(controller=_children_cpu() - cpu_before,
               nodes=None if nodes_before is None or nodes_after is None else nodes_after - nodes_before)
    if rc != 0:
        failed = [e["event_data"] for e in events if e["event"] in ("runner_on_failed", "runner_on_unreachable")
                  and not e["event_data"].get("ignore_errors")]
        for data in failed[:5]:
            sys.stderr.write("%s: %s: %s\n" % (data.get("host"), data.get("task"),
                                               str(data.get("res", {}).get("msg", ""))[:500]))
        raise SystemExit("benchmark: %s failed (rc=%d, recap %s)" % (playbook, rc, stats.get("failures")))
    return seconds, events


def task_rows(events):
    """One row per task: name, action, seconds, host count, changed count, skipped.

    A task is keyed by its play and its place in the source (task_path; the task's id where there is none), so
    the results of one task on every host land in one row, also under strategy free (where hosts reach a task
    at different times) and for included tasks (which get a new id per host). A row's seconds are the longest
    host's: a linear play's task lasts as long as its slowest host."""
    merged = {}
    for event in events:
        data = event.get("event_data", {})
        key = (data.get("play_uuid"), data.get("task_path") or data.get("task_uuid"), data.get("task"))
        entry = merged.setdefault(key, {"name": data.get("task") or "?", "hosts": {}, "changed_hosts": set(),
                                        "seconds": 0.0,
                                        "action": data.get("resolved_action") or data.get("task_action") or ""})
        entry["hosts"][data.get("host")] = event["event"]
        if event["event"] == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            entry["changed_hosts"].add(data.get("host"))
        if data.get("duration") is not None:
            entry["seconds"] = max(entry["seconds"], float(data["duration"]))
    rows = []
    for entry in merged.values():
        hosts = entry["hosts"]
        rows.append({
            "name": entry["name"],
            "action": entry["action"],
            "seconds": entry["seconds"],
            "hosts": len(hosts),
            "changed": len(entry["changed_hosts"]),
            "skipped": all(outcome == "runner_on_skipped" for outcome in hosts.values()),
        })
    return rows


def summarize(label, seconds, rows):
    executions = sum(r["hosts"] for r in rows)
    tasks = len(rows)
    changed = sum(r["changed"] for r in rows)
    print("%-28s wall %7.1fs  tasks %4d  task-host runs %5d  tasks/s %6.2f  changed %d"
          % (label, seconds, tasks, executions, tasks / seconds if seconds else 0, changed))
    busy = CPU.get("controller", 0.0) + (CPU.get("nodes") or 0.0)
    print("%-28s CPU: controller %.1fs, nodes %s; %.2f of %d cores busy on average"
          % ("", CPU.get("controller", 0.0), "%.1fs" % CPU["nodes"] if CPU.get("nodes") is not None else "n/a",
             busy / seconds if seconds else 0, os.cpu_count()))
    return {"seconds": seconds, "tasks": tasks, "executions": executions, "changed": changed, "cpu": busy}


def split_packages(rows):
    packages = sum(r["seconds"] for r in rows if r["action"] in PACKAGE_ACTIONS)
    return packages, sum(r["seconds"] for r in rows) - packages


def ping_floor(task_count):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=ROOT, delete=False) as handle:
        handle.write("---\n- name: Ping floor\n  hosts: lab-node1\n  gather_facts: false\n  tasks:\n")
        for index in range(task_count):
            handle.write("    - name: Ping %d\n      ansible.builtin.ping:\n" % index)
        path = handle.name
    try:
        seconds, events = run_events(path)
    finally:
        os.remove(path)
    return seconds, task_rows(events)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes-small", type=int, default=1)
    parser.add_argument("--nodes-large", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="leave the lab running at the end")
    args = parser.parse_args(argv)

    print("benchmark: %s, %d cores" % (os.uname().nodename, os.cpu_count()))
    subprocess.check_call(LAB + ["down"], stdout=subprocess.DEVNULL)
    figures = {}
    try:
        for size in (args.nodes_small, args.nodes_large):
            subprocess.check_call(LAB + ["nodes", "--nodes", str(size)], stdout=subprocess.DEVNULL)
            if not figures:
                # site.yml distributes the signed training image: the lab registry publishes it first (not timed).
                lab.publish_image(quiet=True)
            seconds, events = run_events("site.yml")
            rows = task_rows(events)
            packages, rest = split_packages(rows)
            summarize("%d node(s) first converge" % size, seconds, rows)
            print("%-28s package tasks %.1fs, other tasks %.1fs (task time, summed)" % ("", packages, rest))
            seconds, events = run_events("site.yml")
            rows = task_rows(events)
            figures[size] = summarize("%d node(s) no-op re-run" % size, seconds, rows)
            print("  ten slowest no-op tasks:")
            for row in sorted(rows, key=lambda r: r["seconds"], reverse=True)[:10]:
                print("    %6.2fs  %-60s %s" % (row["seconds"], row["name"][:60], row["action"]))
        small, large = figures[args.nodes_small], figures[args.nodes_large]
        print("ratio %d nodes / %d node(s) no-op wall time: %.2f (goal <= 1.3)"
              % (args.nodes_large, args.nodes_small, large["seconds"] / small["seconds"]))
        # Where controller and nodes share the same cores, the large run cannot finish before its CPU work is
        # done on all of them: that bounds the ratio from below, whatever Ansible does.
        if large["cpu"] and small["seconds"]:
            floor = large["cpu"] / os.cpu_count()
            print("  CPU-bound floor here: %.1fs of CPU over %d cores = %.1fs, ratio >= %.2f on this machine"
                  % (large["cpu"], os.cpu_count(), floor, floor / small["seconds"]))
        seconds, rows = ping_floor(small["tasks"])
        print("floor: %d ansible.builtin.ping tasks on 1 node: %.1fs, %.2f tasks/s; site.yml no-op is %.1fx the floor"
              % (len(rows), seconds, len(rows) / seconds, small["seconds"] / seconds))
    finally:
        if not args.keep:
            subprocess.call(LAB + ["down"], stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
