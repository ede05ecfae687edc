"""Run a command (ansible-playbook) and kill it, with everything it started, part way through a task.

    interrupt_run.py --task REGEX --delay SECONDS -- COMMAND [ARG...]

The command runs in a session of its own with unbuffered output. Once it prints the banner of a task whose name
matches REGEX ("TASK [... REGEX ...]"), this waits SECONDS (the task's module is then on its way or running on the
node) and sends SIGKILL to the whole session: no handler, no rescue, no cleanup of Ansible's runs. Prints one JSON
object: killed (whether the banner came and the kill was sent), task (the banner line), rc, seconds, and the last
lines of output. Exits 0 when it killed the command, 1 when the command ended first (the banner never came).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="regular expression a task name must match")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between the banner and the kill")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    banner = re.compile(r"^TASK \[.*(%s).*\]" % args.task)
    env = dict(os.environ, PYTHONUNBUFFERED="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True, bufsize=1)
    lines = []
    seen = None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if banner.search(line):
            seen = line.strip()
            time.sleep(args.delay)
            os.killpg(proc.pid, signal.SIGKILL)
            break
    rc = proc.wait()
    print(json.dumps({"killed": seen is not None, "task": seen, "rc": rc,
                      "seconds": round(time.monotonic() - started, 1), "tail": lines[-15:]}))
    return 0 if seen is not None else 1


if __name__ == "__main__":
    sys.exit(main())
