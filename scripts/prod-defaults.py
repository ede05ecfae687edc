#!/usr/bin/env python3
"""Write inventories/prod/group_vars/all/<role>.yml: every setting of a role, commented out, at its default.

    python scripts/prod-defaults.py           rewrite the files from roles/<role>/defaults/main.yml
    python scripts/prod-defaults.py --check   exit 1 and name the files that are out of date

The roles listed are the ones with a file there already; tests/unit/test_prod_inventory.py runs --check.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "inventories", "prod", "group_vars", "all")


def sample(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as handle:
        lines = handle.read().splitlines()
    if lines and lines[0] == "---":
        lines = lines[1:]
    out = ["---",
           "# %s: every setting of the role, at its default (roles/%s/defaults/main.yml)." % (role, role),
           "# Uncomment a line to change it for the whole fleet; roles/%s/README.md says what each one does." % role]
    out += [line if not line.strip() or line.startswith("#") else "# " + line for line in lines]
    return "\n".join(out) + "\n"


def roles():
    return sorted(name[:-4] for name in os.listdir(SAMPLES)
                  if name.endswith(".yml") and os.path.isdir(os.path.join(ROOT, "roles", name[:-4])))


def main(argv):
    stale = []
    for role in roles():
        path = os.path.join(SAMPLES, role + ".yml")
        with open(path) as handle:
            current = handle.read()
        wanted = sample(role)
        if current != wanted:
            stale.append(os.path.relpath(path, ROOT))
            if "--check" not in argv:
                with open(path, "w") as handle:
                    handle.write(wanted)
    if stale and "--check" in argv:
        print("out of date (run python scripts/prod-defaults.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
