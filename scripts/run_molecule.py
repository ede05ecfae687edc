#!/usr/bin/env python3
"""Run `molecule test` for every scenario under molecule/, a few at a time, one log file each.

    python scripts/run_molecule.py [scenario ...]

MOLECULE_JOBS (default 2) scenarios run at once; all share the node image and the apt cache volume.
Logs go to .cache/molecule-logs/<scenario>.log; a failed scenario's log tail is printed when it ends, and once all
have ended, the failed tasks of each failed scenario (task name, failure line, its message) are printed again, just
before the closing `molecule: N passed, M failed`, so the end of a CI log says what failed.
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG_DIR = os.path.join(ROOT, ".cache", "molecule-logs")
# Scenarios that take longest start first, so parallel slots stay busy until the end.
SLOW_FIRST = ["cluster", "security", "nvidia_driver", "image_build", "image_security", "container_runtime",
              "nvidia_container_toolkit", "gpu_monitoring", "interconnect"]


def scenarios():
    base = os.path.join(ROOT, "molecule")
    found = sorted(d for d in os.listdir(base) if os.path.isfile(os.path.join(base, d, "molecule.yml")))
    return sorted(found, key=lambda s: SLOW_FIRST.index(s) if s in SLOW_FIRST else len(SLOW_FIRST))


def run(scenario):
    log_path = os.path.join(LOG_DIR, scenario + ".log")
    started = time.monotonic()
    env = dict(os.environ, PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", NO_COLOR="1")
    with open(log_path, "w") as log:
        rc = subprocess.call(["molecule", "test", "-s", scenario], cwd=ROOT, stdout=log,
                             stderr=subprocess.STDOUT, env=env)
    return scenario, rc, time.monotonic() - started, log_path


def tail(path, lines=80):
    with open(path, errors="replace") as handle:
        return "".join(handle.readlines()[-lines:])


# Ansible's failure lines: `fatal: [host]: FAILED! => ...`, `failed: [host] (item=...) => ...`; molecule's own
# (an idempotence failure), but not its lines that only repeat a playbook's return code.
# molecule's own CRITICAL lines, less two that are no failure: its summary of a failed playbook (the playbook's
# failure is shown instead) and its note, with -s, that there is no default scenario.
FAILURE = re.compile(r"^(fatal|failed): \[|^CRITICAL (?!Ansible return code was|'molecule/default/molecule\.yml' glob failed)")
TASK = re.compile(r"^TASK \[(.*)\]")
KEY = re.compile(r"^\s+(msg|rc|stderr|stdout|reason|item|module_stderr|module_stdout|exception):")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failures(path, most=4, lines_each=8, width=240):
    """The failed tasks in a molecule log: the task's name, the failure line and the indented lines under it.

    Retries (`FAILED - RETRYING`) and failures Ansible ignored (`...ignoring` under the block) are left out."""
    with open(path, errors="replace") as handle:
        lines = handle.read().splitlines()
    found, task = [], None
    for number, line in enumerate(lines):
        heading = TASK.match(line)
        if heading:
            task = heading.group(1)
            continue
        if not FAILURE.match(line):
            continue
        own = not line.startswith(("fatal", "failed"))
        under, after = [], number + 1
        # Under Ansible's line: its indented result; under molecule's: its `*  [host] => task` list as well.
        while after < len(lines) and lines[after].startswith((" ", "\t") + (("*",) if own else ())):
            under.append(lines[after])
            after += 1
        if after < len(lines) and lines[after].strip() == "...ignoring":
            continue
        if len(under) >= lines_each:
            # A long result (a command's argv, a loop item): its message, return code and output say what failed.
            telling = [text for text in under if KEY.match(text)]
            under = telling if telling else under
        block = [line] + under[:lines_each - 1]
        found.append(("(molecule)" if own else (task or "(no task)"), [ANSI.sub("", text)[:width] for text in block]))
    return found[-most:]


def main(argv):
    os.makedirs(LOG_DIR, exist_ok=True)
    chosen = argv or scenarios()
    jobs = int(os.environ.get("MOLECULE_JOBS", "2"))
    print("molecule: %d scenario(s), %d at a time: %s" % (len(chosen), jobs, " ".join(chosen)), flush=True)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for scenario, rc, seconds, log_path in pool.map(run, chosen):
            verdict = "passed" if rc == 0 else "FAILED"
            print("molecule %-26s %-6s %6.0fs  (%s)" % (scenario, verdict, seconds, os.path.relpath(log_path, ROOT)),
                  flush=True)
            if rc != 0:
                print(tail(log_path), flush=True)
            results.append((scenario, rc))
    failed = [s for s, rc in results if rc != 0]
    for scenario in failed:
        print("molecule %s: failed tasks (.cache/molecule-logs/%s.log)" % (scenario, scenario))
        for task, block in failures(os.path.join(LOG_DIR, scenario + ".log")) or [("(none found)", [])]:
            print("  TASK [%s]" % task)
            for text in block:
                print("    " + text)
    print("molecule: %d passed, %d failed%s"
          % (len(results) - len(failed), len(failed), (" (" + ", ".join(failed) + ")") if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
