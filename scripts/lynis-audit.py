#!/usr/bin/env python3
"""Lynis hardening index per node, with what is left: a measurement, not a test.

    python scripts/lynis-audit.py [-i INVENTORY] [--limit HOSTS] [--json FILE]

Runs playbooks/audit.yml (Debian's lynis on each node, installed from the node's own package sources) against
INVENTORY (default: the lab's, inventories/lab/hosts.yml; `make lab` first) and prints, per node: the index,
the number of tests, the warnings and suggestions lynis left, and the tests it did not score in a container with
the reason. Ends with the lowest index. It asserts nothing; playbooks/audit.yml -e audit_min_index=N does.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAYBOOK = os.path.join(ROOT, "playbooks", "audit.yml")


def run_audit(inventory, limit, report_dir):
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, PLAYBOOK,
            "-e", "audit_report_dir=" + report_dir]
    if limit:
        argv += ["--limit", limit]
    return subprocess.call(argv, cwd=ROOT)


def print_node(name, figures):
    print("\n%s: hardening index %s (lynis %s, %s tests%s)" % (
        name, figures["hardening_index"], figures["lynis_version"], figures["tests_performed"],
        ", audited as a container" if figures["container"] else ""))
    for kind in ("warnings", "suggestions"):
        entries = figures["lynis_" + kind]
        print("  %d %s%s" % (len(entries), kind, ":" if entries else ""))
        for entry in entries:
            detail = (" [%s]" % entry["details"]) if entry.get("details") else ""
            print("    %-10s %s%s" % (entry["test"], entry["text"], detail))
    if figures["unscored"]:
        print("  %d unscored (container):" % len(figures["unscored"]))
        by_reason = {}
        for entry in figures["unscored"]:
            by_reason.setdefault(entry["reason"], []).append(entry["test"])
        for reason, tests in by_reason.items():
            if len(tests) == 1:
                print("    %-10s %s" % (tests[0], reason))
            else:
                keys = sorted(test.split(":", 1)[-1] for test in tests)
                print("    %s (%d keys: %s): %s" % (tests[0].split(":", 1)[0], len(keys), ", ".join(keys), reason))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default=os.path.join(ROOT, "inventories", "lab", "hosts.yml"))
    parser.add_argument("--limit", default="")
    parser.add_argument("--json", help="also write every node's figures to this file")
    args = parser.parse_args(argv)
    if not os.path.exists(args.inventory):
        raise SystemExit("lynis-audit: %s is not there (make lab first, or give -i)" % args.inventory)
    with tempfile.TemporaryDirectory(prefix="gpufleet-audit-") as report_dir:
        rc = run_audit(args.inventory, args.limit, report_dir)
        nodes = {}
        for name in sorted(os.listdir(report_dir)):
            with open(os.path.join(report_dir, name)) as handle:
                nodes[name[:-len(".json")]] = json.load(handle)
    print("\nlynis audit, %s, controller %s (%s, %d CPUs)" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), platform.node(),
        platform.platform(terse=True), os.cpu_count() or 0))
    for name, figures in nodes.items():
        print_node(name, figures)
    if nodes:
        lowest = min(nodes.items(), key=lambda item: item[1]["hardening_index"])
        print("\nlowest index: %s (%s), over %d node(s)" % (lowest[1]["hardening_index"], lowest[0], len(nodes)))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(nodes, handle, indent=2, sort_keys=True)
    if rc != 0 or not nodes:
        print("lynis-audit: the audit playbook failed (rc=%d) or no node reported" % rc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
