#!/usr/bin/env python3
"""Run `molecule test` for every scenario under molecule/, a few at a time, one log file each.

    python scripts/run_molecule.py [scenario ...]

MOLECULE_JOBS (default 2) scenarios run at once; all share the node image and the apt cache volume.
Logs go to .cache/molecule-logs/<scenario>.log; a failed scenario's log tail is printed.
Closes with `molecule: N passed, M failed`.
"""
import concurrent.futures
import os
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
    print("molecule: %d passed, %d failed%s"
          % (len(results) - len(failed), len(failed), (" (" + ", ".join(failed) + ")") if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
