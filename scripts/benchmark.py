#!/usr/bin/env python3
"""No-op run figures for site.yml on the lab, beside dev-sec's hardening roles on a node of their own.

    python scripts/benchmark.py [--sizes 1,2,4] [--peer PATH] [--pairs N] [--keep]

For each fleet size in --sizes (the lab grows from one size to the next), it prints the first converge of the new
nodes (wall time, split into package download/install tasks and the rest) and the no-op re-run (wall time, task
count, tasks per second, changed count, the controller's and the nodes' CPU time per node, the ten slowest tasks).

At one node it also runs, on one more lab node that gpufleet never touches (the two would fight over sshd and
sysctl on a shared node):
  - dev-sec's devsec.hardening.os_hardening and ssh_hardening from the collection at --peer (default: the
    GPUFLEET_PEER_DEVSEC environment variable): converged once, not timed, then its no-op run timed. Without a
    peer the comparison is reported as not measured, and the rest still runs;
  - with --pairs N (and a peer), N - 1 more pairs of the two no-op runs, site.yml's then dev-sec's, each pair's
    ratio printed; the 1-node goals then take the median of the N runs of each (one run's spread, 10 to 20 % on a
    shared development VM, is larger than most changes it is asked to show).

Then the goals from this one run (site.yml no-op / dev-sec no-op, CPU per node with PASS or MISS), the
controller CPU per node at each size with a least-squares line cpu = a + b * nodes, the controller cores that
line projects for re-checking 100 and 1000 nodes in 15 minutes (a projection, not a measurement), and the floor:
a playbook of as many ansible.builtin.ping tasks on one node.

This is a measurement, not a test: it asserts nothing and exits 0 unless a playbook fails. It tears the lab down
at the end (unless --keep).

The playbooks run through ansible-runner (scripts/lab.py's run_playbook); the per-task figures come from its
event stream: every task result (runner_on_ok, _failed, _skipped, _unreachable) carries its host, its task's
place in the source and its start, end and duration.
"""
import argparse
import ctypes
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import lab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = [sys.executable, os.path.join(ROOT, "scripts", "lab.py")]
PACKAGE_ACTIONS = {"ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf", "apt", "package", "dnf",
                   "ansible.builtin.apt_repository", "ansible.builtin.deb822_repository"}

# The goals, checked against this run's figures (printed with PASS or MISS, never enforced).
GOAL_PEER_RATIO = 0.35  # site.yml no-op wall time / dev-sec's hardening-only no-op wall time, one node each
GOAL_CONTROLLER_CPU = 10.0  # controller CPU seconds per node per no-op run
GOAL_NODE_CPU = 10.0  # node CPU seconds per node per no-op run
PROJECTED_FLEETS = (100, 1000)
RECHECK_WINDOW = 15 * 60  # seconds: a drift re-check of the whole fleet every 15 minutes

PEER_ENV = "GPUFLEET_PEER_DEVSEC"
PEER_CONTAINER = "gpufleet-lab-peer"
PEER_HOST = "lab-peer"
PEER_ROLES = ("os_hardening", "ssh_hardening")
IDLE_SAMPLE = 10.0  # seconds of idle node CPU sampled before each no-op run


def peer_address():
    # .1 is the bridge gateway, .5 the lab registry, nodes start at .11 (scripts/lab.py): .6 is free.
    return str(lab.SUBNET.network_address + 6)


# --- pure parts: options, figures, goals, the line and its projection ---------------------------------------

def parse_sizes(text):
    """--sizes '1,2,4' -> [1, 2, 4]: fleet sizes, sorted and distinct, each 1..200 (scripts/lab.py's range)."""
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError("--sizes takes node counts separated by commas, such as 1,2,4")
    if not sizes or sizes[0] < 1 or sizes[-1] > 200:
        raise argparse.ArgumentTypeError("--sizes: each size must be between 1 and 200")
    return sizes


def verdict(value, goal):
    """PASS when a figure is within its goal (at most), MISS otherwise."""
    return "PASS" if value <= goal else "MISS"


def fit_line(points):
    """Least-squares line through (nodes, seconds) points: (a, b) of seconds = a + b * nodes.

    statistics.linear_regression does the fit; it needs two different node counts."""
    xs = [float(x) for x, _unused in points]
    ys = [float(y) for _unused, y in points]
    if len(set(xs)) < 2:
        raise ValueError("a line needs runs at two different fleet sizes at least")
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def cores_needed(a, b, nodes, window=RECHECK_WINDOW):
    """Controller cores that do a + b * nodes CPU seconds of work within window seconds."""
    return (a + b * nodes) / window


def peer_ratio_line(gpufleet_seconds, peer_seconds, goal=GOAL_PEER_RATIO, why_not=None):
    """The site.yml / dev-sec no-op line, or why it was not measured."""
    label = "site.yml no-op / dev-sec os_hardening+ssh_hardening no-op, 1 node each"
    if gpufleet_seconds is None or peer_seconds is None:
        return "  %s: not measured (%s)" % (label, why_not or "no figure")
    ratio = gpufleet_seconds / peer_seconds
    return "  %s: %.1fs / %.1fs = %.2f (goal <= %.2f) %s" % (
        label, gpufleet_seconds, peer_seconds, ratio, goal, verdict(ratio, goal))


def per_node_goal_line(label, per_node, goal):
    """A goal on a per-node figure measured at several fleet sizes: PASS only when every size is within it.

    per_node maps a fleet size to its seconds per node, or None where that figure could not be read."""
    known = {size: value for size, value in per_node.items() if value is not None}
    if not known:
        return "  %s: not measured (no figure at any size)" % label
    figures = ", ".join("%.1fs at %d node%s" % (known[size], size, "" if size == 1 else "s")
                        for size in sorted(known))
    missing = sorted(set(per_node) - set(known))
    note = "; not read at %s" % ", ".join(str(size) for size in missing) if missing else ""
    worst = max(known.values())
    return "  %s: %s (goal <= %.0fs at every size%s) %s" % (label, figures, goal, note, verdict(worst, goal))


def projection_lines(points, fleets=PROJECTED_FLEETS, window=RECHECK_WINDOW):
    """Controller CPU per node at each size, the fitted line, and the cores it projects for bigger fleets.

    points are (nodes, controller CPU seconds of that size's no-op run)."""
    lines = ["controller CPU per no-op run (measured):"]
    for nodes, seconds in sorted(points):
        lines.append("  %4d node%s: %7.1fs, %6.1fs per node" % (nodes, " " if nodes == 1 else "s", seconds,
                                                                seconds / nodes))
    try:
        a, b = fit_line(points)
    except ValueError as error:
        lines.append("line and projection: not computed (%s)" % error)
        return lines
    lines.append("least-squares line over %d sizes: controller CPU = %.1fs + %.2fs x nodes" % (len(points), a, b))
    lines.append("projection from that line, not a measurement: controller cores to re-check the fleet's no-op "
                 "run in %d minutes" % (window // 60))
    for nodes in fleets:
        lines.append("  %4d nodes: %8.0fs of controller CPU -> %5.1f cores"
                     % (nodes, a + b * nodes, cores_needed(a, b, nodes, window)))
    lines.append("  (assumes the cost stays linear in the node count and enough forks to keep those cores busy; "
                 "the nodes' own CPU is spent on the nodes)")
    return lines


# --- the peer: dev-sec's collection on a node of its own ----------------------------------------------------

def check_peer(path):
    """The peer collection's absolute path, or ValueError saying why it is not dev-sec's hardening collection."""
    path = os.path.abspath(path)
    galaxy = os.path.join(path, "galaxy.yml")
    if not os.path.isfile(galaxy):
        raise ValueError("%s has no galaxy.yml" % path)
    import yaml
    with open(galaxy) as handle:
        meta = yaml.safe_load(handle) or {}
    if (meta.get("namespace"), meta.get("name")) != ("devsec", "hardening"):
        raise ValueError("%s is %s.%s, not devsec.hardening" % (path, meta.get("namespace"), meta.get("name")))
    for role in PEER_ROLES:
        if not os.path.isdir(os.path.join(path, "roles", role)):
            raise ValueError("%s has no roles/%s" % (path, role))
    return path


def peer_collections_root(workdir, peer_path):
    """A collections root whose ansible_collections/devsec/hardening is a link to the peer's folder.

    It goes on ANSIBLE_COLLECTIONS_PATH for the peer's runs only: gpufleet's runs never see it."""
    root = os.path.join(workdir, "collections")
    namespace = os.path.join(root, "ansible_collections", "devsec")
    os.makedirs(namespace, exist_ok=True)
    link = os.path.join(namespace, "hardening")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.abspath(peer_path), link)
    return root


def peer_inventory(address, key, known_hosts, host=PEER_HOST):
    """The peer node's inventory: reached as the lab's admin account with the lab key, becoming root with sudo,
    host key checked, as scripts/lab.py reaches gpufleet's nodes (inventories/lab is not used: its group_vars
    belong to gpufleet)."""
    return "\n".join([
        "---",
        "# Written by scripts/benchmark.py for dev-sec's hardening roles on the lab's peer node.",
        "all:",
        "  hosts:",
        "    %s:" % host,
        "      ansible_host: %s" % address,
        "      ansible_user: %s" % lab.ADMIN,
        "      ansible_become: true",
        "      ansible_python_interpreter: /usr/bin/python3",
        "      ansible_ssh_private_key_file: %s" % key,
        # IdentitiesOnly: ssh_hardening allows two authentication attempts (MaxAuthTries 2); keys of an agent on
        # the controller must not use them up before the lab key is offered.
        "      ansible_ssh_common_args: -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
        % known_hosts,
        "",
    ])


def peer_playbook(host=PEER_HOST):
    """dev-sec's hardening roles on the peer, as their README applies them: full facts, every part left on.

    What keeps the lab's login working (the admin account, its key, sudo), with dev-sec's defaults:
      - ssh_permit_root_login stays "no": the lab logs in as gpufleet-admin, never as root (a node reached as
        root would need "without-password");
      - sshd_authenticationmethods stays "publickey" and ssh_server_password_login false: the lab key is a key;
      - ssh_allow_users / ssh_allow_groups stay empty: dev-sec's sshd lets every account in;
      - ssh_use_pam stays true: the admin account has no password (locked), and with PAM sshd lets a locked
        account in with its key;
      - os_hardening leaves accounts at or above UID_MIN alone (uid 2000), chmods home folders 0700 (sshd's
        StrictModes accepts it) and does not touch sudoers; su becomes root-only, sudo stays.
    One setting is the container's, not the login's: os_auditd_enabled false. auditd cannot start in a container
    (no audit capability), so dev-sec's restart handler fails the run; gpufleet's os_hardening leaves auditd out
    in a container by itself. os_hardening also skips its sysctl block in a container by itself."""
    return "\n".join([
        "---",
        "# Written by scripts/benchmark.py: dev-sec's hardening roles on the lab's peer node, for a side-by-side",
        "# measurement with site.yml.",
        "- name: Apply dev-sec's OS and SSH hardening",
        "  hosts: %s" % host,
        "  gather_facts: true",
        "  gather_subset: [all]",
        "  become: true",
        "  vars:",
        "    # auditd cannot start in a lab container (no audit capability).",
        "    os_auditd_enabled: false",
        "  roles:",
        "    - devsec.hardening.os_hardening",
        "    - devsec.hardening.ssh_hardening",
        "",
    ])


def peer_env(collections_root, facts_dir):
    """The peer run's environment: its collections root, and a fact cache of its own (gpufleet's .cache/facts
    holds only the subsets site.yml gathers). Like gpufleet's no-op run, the peer's no-op reads the facts its
    converge gathered (gathering = smart)."""
    return {
        # Only the peer's root: ansible.posix, community.general and community.crypto, which dev-sec's roles use,
        # come with the installed Ansible (found on Python's path), and gpufleet's own collection stays out.
        "ANSIBLE_COLLECTIONS_PATH": collections_root,
        "ANSIBLE_CACHE_PLUGIN": "jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": facts_dir,
    }


# --- CPU accounting -----------------------------------------------------------------------------------------

def become_subreaper():
    """Make this process the reaper of its orphaned descendants (Linux prctl PR_SET_CHILD_SUBREAPER).

    SSH's ControlPersist masters fork into the background and outlive ansible-playbook: without this they go to
    init and their CPU time (the connections' encryption) would never reach RUSAGE_CHILDREN."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _child_processes():
    """{pid: command name} of this process's live children, from /proc."""
    me, found = os.getpid(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                stat = handle.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(rest[1]) == me and rest[0] != "Z":
            found[int(entry)] = name
    return found


def end_leftovers():
    """End the SSH masters a run left (each timed run starts without one, as a re-check every 15 minutes does:
    ControlPersist is 120 s) and reap every finished descendant, so that their CPU time is counted."""
    children = _child_processes()
    for pid, name in children.items():
        if name == "ssh":
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no child left
        if pid == 0:  # children left, none of them finished yet
            time.sleep(0.05)


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lab_containers():
    """{container name: full id} of the running lab containers."""
    out = subprocess.run(["docker", "ps", "--no-trunc", "--filter", "label=gpufleet.lab", "--format",
                          "{{.Names}} {{.ID}}"], capture_output=True, check=False, text=True).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def container_cpu_seconds(cid):
    """CPU seconds a container has used so far (cgroup v1 cpuacct or v2 cpu.stat), or None."""
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
        return int(text.strip()) * scale
    return None


def nodes_cpu_seconds(containers):
    """Summed CPU seconds of the given containers ({name: id}), or None when one cannot be read."""
    total = 0.0
    for cid in containers.values():
        seconds = container_cpu_seconds(cid)
        if seconds is None:
            return None
        total += seconds
    return total


def idle_rate(containers, seconds=IDLE_SAMPLE):
    """The containers' CPU per second while nothing runs on them (their services), or None."""
    before = nodes_cpu_seconds(containers)
    time.sleep(seconds)
    after = nodes_cpu_seconds(containers)
    return None if before is None or after is None else (after - before) / seconds


# --- runs ---------------------------------------------------------------------------------------------------

RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")


def run_events(playbook, *extra, nodes=None, env=None, inventory=None):
    """Run a playbook quietly through ansible-runner; return a dict of its figures.

    seconds (wall), events (its task results), controller (CPU seconds of ansible-playbook, its forks and their
    ssh, the SSH masters it left included) and nodes (CPU seconds of the given node containers, {name: id})."""
    events = []

    def keep(event):
        if event.get("event") in RESULT_EVENTS:
            events.append(event)

    nodes = nodes or {}
    nodes_before = nodes_cpu_seconds(nodes)
    cpu_before = _children_cpu()
    started = time.monotonic()
    rc, stats = lab.run_playbook(playbook, *extra, quiet=True, on_event=keep, inventory=inventory, env=env)
    seconds = time.monotonic() - started
    end_leftovers()
    controller = _children_cpu() - cpu_before
    nodes_after = nodes_cpu_seconds(nodes)
    if rc != 0:
        failed = [e["event_data"] for e in events if e["event"] in ("runner_on_failed", "runner_on_unreachable")
                  and not e["event_data"].get("ignore_errors")]
        for data in failed[:5]:
            sys.stderr.write("%s: %s: %s\n" % (data.get("host"), data.get("task"),
                                               str(data.get("res", {}).get("msg", ""))[:500]))
        raise SystemExit("benchmark: %s failed (rc=%d, recap %s)" % (playbook, rc, stats.get("failures")))
    return {"seconds": seconds, "events": events, "controller": controller,
            "nodes": None if nodes_before is None or nodes_after is None else nodes_after - nodes_before}


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


# Actions that never leave the controller: their results cost no round trip to the node.
CONTROLLER_ACTIONS = {"ansible.builtin.%s" % name for name in (
    "set_fact", "assert", "debug", "fail", "include_vars", "validate_argument_spec", "meta", "include_tasks",
    "include_role", "import_tasks", "import_role", "add_host", "group_by", "pause", "set_stats")}


def node_round_trips(data):
    """How many times one task result started a module on the node itself: none for a skip, a controller-only
    action or a task delegated to the controller; one per item that ran for a loop."""
    res = data.get("res") or {}
    action = data.get("resolved_action") or data.get("task_action") or ""
    if action in CONTROLLER_ACTIONS or res.get("skipped"):
        return 0
    delegated = res.get("_ansible_delegated_vars") or {}
    if delegated.get("ansible_connection") == "local" or delegated.get("ansible_host") in ("localhost", "127.0.0.1"):
        return 0
    if isinstance(res.get("results"), list):
        return sum(1 for item in res["results"] if not (isinstance(item, dict) and item.get("skipped")))
    return 1


def role_rows(events):
    """Per role (tasks outside roles under "(play)"), over every host: task results, of which skipped, node round
    trips (node_round_trips) and the seconds its results took, summed; sorted by round trips, most first."""
    roles = {}
    for event in events:
        data = event.get("event_data", {})
        row = roles.setdefault(data.get("role") or "(play)", {"role": data.get("role") or "(play)", "results": 0,
                                                              "skipped": 0, "round_trips": 0, "seconds": 0.0})
        row["results"] += 1
        row["skipped"] += event["event"] == "runner_on_skipped"
        row["round_trips"] += 0 if event["event"] == "runner_on_skipped" else node_round_trips(data)
        row["seconds"] += float(data.get("duration") or 0.0)
    return sorted(roles.values(), key=lambda row: (-row["round_trips"], -row["results"], row["role"]))


def print_roles(rows, node_count=1):
    print("  per role, per node: task results (skipped), node round trips, seconds of results")
    for row in rows:
        figures = (row["results"], row["skipped"], row["round_trips"], row["seconds"])
        print("    %-26s %6.1f (%5.1f) %6.1f %7.1fs" % ((row["role"],) + tuple(f / node_count for f in figures)))
    totals = [sum(r[key] for r in rows) / node_count for key in ("results", "skipped", "round_trips")]
    print("    %-26s %6.1f (%5.1f) %6.1f" % tuple(["all"] + totals))


def summarize(label, seconds, rows, controller, nodes, node_count=1, idle=None):
    """Print a run's two lines; return its figures (CPU per node where the node CPU could be read)."""
    executions = sum(r["hosts"] for r in rows)
    tasks = len(rows)
    changed = sum(r["changed"] for r in rows)
    print("%-30s wall %7.1fs  tasks %4d  task-host runs %5d  tasks/s %6.2f  changed %d"
          % (label, seconds, tasks, executions, tasks / seconds if seconds else 0, changed))
    busy = controller + (nodes or 0.0)
    if nodes is None:
        node_text = "nodes n/a"
    else:
        node_text = "nodes %.1fs (%.1fs per node" % (nodes, nodes / node_count)
        if idle is not None:
            node_text += ", of which %.1fs their services' idle load" % (idle * seconds / node_count)
        node_text += ")"
    print("%-30s CPU: controller %.1fs (%.1fs per node), %s; %.2f of %d cores busy on average"
          % ("", controller, controller / node_count, node_text, busy / seconds if seconds else 0, os.cpu_count()))
    return {"seconds": seconds, "tasks": tasks, "executions": executions, "changed": changed, "cpu": busy,
            "controller": controller, "controller_per_node": controller / node_count,
            "nodes_per_node": None if nodes is None else nodes / node_count}


def split_packages(rows):
    packages = sum(r["seconds"] for r in rows if r["action"] in PACKAGE_ACTIONS)
    return packages, sum(r["seconds"] for r in rows) - packages


def print_slowest(rows, count=10):
    for row in sorted(rows, key=lambda r: r["seconds"], reverse=True)[:count]:
        print("    %6.2fs  %-60s %s" % (row["seconds"], row["name"][:60], row["action"]))


def ping_floor(task_count):
    # Under .cache (ignored by git): a run killed here leaves nothing in the checkout.
    cache = os.path.join(ROOT, ".cache")
    os.makedirs(cache, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=cache, delete=False) as handle:
        handle.write("---\n- name: Ping floor\n  hosts: lab-node1\n  gather_facts: false\n  tasks:\n")
        for index in range(task_count):
            handle.write("    - name: Ping %d\n      ansible.builtin.ping:\n" % index)
        path = handle.name
    try:
        run = run_events(path)
    finally:
        os.remove(path)
    return run["seconds"], task_rows(run["events"])


def gpufleet_nodes():
    return {name: cid for name, cid in lab_containers().items() if name.startswith("gpufleet-lab-node")}


def start_peer(workdir):
    """One more lab node for dev-sec (label gpufleet.lab: `lab.py down` removes it); return its inventory path."""
    subprocess.run(["docker", "rm", "-f", PEER_CONTAINER], capture_output=True, check=False)
    lab.sh(lab.container_args(PEER_CONTAINER, PEER_HOST, peer_address()), capture=True)
    lab.wait_for_boot(PEER_CONTAINER)
    lab.authorize_container(PEER_CONTAINER)
    known_hosts = os.path.join(workdir, "peer_known_hosts")
    with open(known_hosts, "w") as handle:
        handle.write(lab.container_host_key_line(PEER_CONTAINER, PEER_HOST, peer_address()) + "\n")
    inventory = os.path.join(workdir, "peer.yml")
    with open(inventory, "w") as handle:
        handle.write(peer_inventory(peer_address(), lab.KEY, known_hosts))
    return inventory


def run_peer(workdir, peer_path):
    """dev-sec's roles on the peer node: converge (not timed), then the timed no-op run.

    Returns (its no-op figures, a function that runs and prints its no-op once more with a label)."""
    print("peer: dev-sec's hardening collection at %s on %s (%s)" % (peer_path, PEER_HOST, peer_address()))
    inventory = start_peer(workdir)
    playbook = os.path.join(workdir, "devsec-hardening.yml")
    with open(playbook, "w") as handle:
        handle.write(peer_playbook())
    env = peer_env(peer_collections_root(workdir, peer_path), os.path.join(workdir, "peer-facts"))
    containers = {PEER_CONTAINER: lab_containers()[PEER_CONTAINER]}
    run = run_events(playbook, nodes=containers, env=env, inventory=inventory)
    rows = task_rows(run["events"])
    summarize("dev-sec first converge", run["seconds"], rows, run["controller"], run["nodes"])
    idle = idle_rate(containers)

    def noop(label):
        run = run_events(playbook, nodes=containers, env=env, inventory=inventory)
        rows = task_rows(run["events"])
        return summarize(label, run["seconds"], rows, run["controller"], run["nodes"], idle=idle), rows

    figures, rows = noop("dev-sec no-op re-run")
    print("  five slowest dev-sec no-op tasks:")
    print_slowest(rows, 5)
    return figures, lambda label: noop(label)[0]


def median_figures(runs):
    """The median of each figure over several runs of the same no-op (None where a run could not read it)."""
    merged = {}
    for key in runs[0]:
        values = [run[key] for run in runs]
        merged[key] = None if any(value is None for value in values) else statistics.median(values)
    return merged


def pair_lines(gpufleet_runs, peer_runs):
    """One line per pair of no-op runs (site.yml's, then dev-sec's), then the median ratio."""
    ratios = [ours["seconds"] / theirs["seconds"] for ours, theirs in zip(gpufleet_runs, peer_runs)]
    lines = ["  pair %d: site.yml %.1fs / dev-sec %.1fs = %.2f" % (number, ours["seconds"], theirs["seconds"], ratio)
             for number, (ours, theirs, ratio) in enumerate(zip(gpufleet_runs, peer_runs, ratios), 1)]
    lines.append("  median of the %d pairs' ratios: %.2f (lowest %.2f, highest %.2f); the goals below take the "
                 "median run of each" % (len(ratios), statistics.median(ratios), min(ratios), max(ratios)))
    return lines


def noop_variant(label, containers, env, idle, *extra):
    """The 1-node no-op of site.yml once more with ``env`` added (and ``extra`` arguments), summarized; returns its
    figures."""
    run = run_events("site.yml", *extra, nodes=containers, env=env)
    return summarize(label, run["seconds"], task_rows(run["events"]), run["controller"], run["nodes"], 1, idle)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=parse_sizes, default=[1, 2, 4],
                        help="fleet sizes to measure, in nodes, separated by commas (default 1,2,4)")
    parser.add_argument("--peer", default=os.environ.get(PEER_ENV) or None,
                        help="dev-sec's hardening collection (a devsec.hardening checkout) to run beside site.yml "
                             "on a node of its own (default: $%s)" % PEER_ENV)
    parser.add_argument("--pairs", type=int, default=1,
                        help="pairs of 1-node no-op runs (site.yml's, then dev-sec's) the goals take the median of "
                             "(default 1; more than 1 needs a peer)")
    parser.add_argument("--keep", action="store_true", help="leave the lab running at the end")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be 1 or more")

    print("benchmark: %s, %d cores; sizes %s" % (os.uname().nodename, os.cpu_count(),
                                                 ",".join(map(str, args.sizes))))
    peer_path, peer_why_not = None, None
    if args.peer:
        try:
            peer_path = check_peer(args.peer)
        except ValueError as error:
            peer_why_not = "--peer: %s" % error
    else:
        peer_why_not = "no --peer given and $%s is not set" % PEER_ENV
    if 1 not in args.sizes:
        peer_why_not = peer_why_not or "no 1-node run in --sizes"
    if peer_why_not:
        print("peer: dev-sec's hardening collection not measured (%s)" % peer_why_not)
        if args.pairs > 1:
            print("pairs: one run of the 1-node no-op only (--pairs needs the peer)")
    if not become_subreaper():
        print("note: cannot become the reaper of the SSH masters: their CPU is missing from the controller's")
    subprocess.check_call(LAB + ["down"], stdout=subprocess.DEVNULL)
    figures, peer, paired = {}, None, 1
    workdir = tempfile.mkdtemp(prefix="gpufleet-benchmark-")
    try:
        for size in args.sizes:
            subprocess.check_call(LAB + ["nodes", "--nodes", str(size)], stdout=subprocess.DEVNULL)
            if not figures:
                # site.yml distributes the signed training image: the lab registry publishes it first (not timed).
                lab.publish_image(quiet=True)
            containers = gpufleet_nodes()
            run = run_events("site.yml", nodes=containers)
            rows = task_rows(run["events"])
            packages, rest = split_packages(rows)
            summarize("%d node(s) first converge" % size, run["seconds"], rows, run["controller"], run["nodes"],
                      size)
            print("%-30s package tasks %.1fs, other tasks %.1fs (task time, summed)" % ("", packages, rest))
            idle = idle_rate(containers)
            run = run_events("site.yml", nodes=containers)
            rows = task_rows(run["events"])
            figures[size] = summarize("%d node(s) no-op re-run" % size, run["seconds"], rows, run["controller"],
                                      run["nodes"], size, idle)
            print("  ten slowest no-op tasks:")
            print_slowest(rows)
            print_roles(role_rows(run["events"]), size)
            if size == 1 and peer_path:
                peer, peer_noop = run_peer(workdir, peer_path)
                if args.pairs > 1:
                    ours, theirs = [figures[1]], [peer]
                    for number in range(2, args.pairs + 1):
                        ours.append(noop_variant("1 node no-op, pair %d" % number, containers, {}, idle))
                        theirs.append(peer_noop("dev-sec no-op, pair %d" % number))
                    for line in pair_lines(ours, theirs):
                        print(line)
                    figures[1], peer, paired = median_figures(ours), median_figures(theirs), args.pairs

        print()
        print("goals (ratios from this run%s):"
              % (", the 1-node figures the median of %d runs each" % paired if paired > 1 else ""))
        print(peer_ratio_line(figures[1]["seconds"] if 1 in figures else None,
                              peer["seconds"] if peer else None, why_not=peer_why_not))
        print(per_node_goal_line("controller CPU per node per no-op run",
                                 {size: f["controller_per_node"] for size, f in figures.items()},
                                 GOAL_CONTROLLER_CPU))
        print(per_node_goal_line("node CPU per node per no-op run",
                                 {size: f["nodes_per_node"] for size, f in figures.items()}, GOAL_NODE_CPU))
        print()
        for line in projection_lines([(size, f["controller"]) for size, f in figures.items()]):
            print(line)
        small, large = figures[args.sizes[0]], figures[args.sizes[-1]]
        if len(args.sizes) > 1:
            print("ratio %d nodes / %d node(s) no-op wall time: %.2f (goal <= 1.3)"
                  % (args.sizes[-1], args.sizes[0], large["seconds"] / small["seconds"]))
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
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
