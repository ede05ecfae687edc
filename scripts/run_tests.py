#!/usr/bin/env python3
"""Run the test stages one after another, keep going after a failure, and close with one summary line.

    python scripts/run_tests.py lint syntax unit integration collection sanity ee core-latest molecule

Each stage is a make target; its output streams through. The last line reads
`make test: N passed, M failed` so CI (and people) see the verdict at a glance.
"""
import subprocess
import sys
import time

STAGES = {
    "lint": ["make", "--no-print-directory", "lint"],
    "syntax": ["make", "--no-print-directory", "syntax"],
    "unit": ["make", "--no-print-directory", "unit"],
    "integration": ["make", "--no-print-directory", "integration"],
    "collection": ["make", "--no-print-directory", "collection"],
    "sanity": ["make", "--no-print-directory", "sanity"],
    "ee": ["make", "--no-print-directory", "ee-image"],
    # unit, integration, collection and sanity again, on the newest ansible-core in a Debian 13 container
    "core-latest": ["make", "--no-print-directory", "core-latest"],
    "molecule": ["make", "--no-print-directory", "molecule"],
}


def main(argv):
    names = argv or list(STAGES)
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        print("unknown stage(s): %s (known: %s)" % (", ".join(unknown), ", ".join(STAGES)))
        return 2
    results = []
    for name in names:
        print("\n==== %s ====" % name, flush=True)
        started = time.monotonic()
        rc = subprocess.call(STAGES[name])
        results.append((name, rc, time.monotonic() - started))
    print("\n==== summary ====")
    for name, rc, seconds in results:
        print("%-12s %-6s %6.0fs" % (name, "passed" if rc == 0 else "FAILED", seconds))
    failed = sum(1 for _unused, rc, _unused in results if rc != 0)
    print("make test: %d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
