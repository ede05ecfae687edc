"""inventories/prod lists every role setting at its default: the samples follow the roles' defaults files.

scripts/role_docs.py writes them (make docs); --check fails when one is out of date.
"""
import os
import re
import subprocess
import sys

import yaml

from conftest import ROOT

SAMPLES = os.path.join(ROOT, "inventories", "prod", "group_vars", "all")
ROLE_SAMPLES = sorted(name[:-4] for name in os.listdir(SAMPLES)
                      if name.endswith(".yml") and os.path.isdir(os.path.join(ROOT, "roles", name[:-4])))


def test_prod_samples_follow_the_role_defaults():
    check = subprocess.run([sys.executable, "scripts/role_docs.py", "--check"], cwd=ROOT,
                           capture_output=True, check=False, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_uncommented_samples_are_exactly_the_role_defaults():
    """Uncommenting every setting of a sample gives the role's defaults, value for value; as shipped, the sample sets
    nothing, so the role defaults apply."""
    assert len(ROLE_SAMPLES) >= 8
    for role in ROLE_SAMPLES:
        with open(os.path.join(SAMPLES, role + ".yml")) as handle:
            lines = handle.read().splitlines()
        assert yaml.safe_load("\n".join(lines)) is None, role
        # A setting's value may run on over further commented lines (folded scalars, block lists).
        key = re.compile(r"^%s_\w+:( |$)" % role)
        text, keep = [], False
        for line in lines[1:]:
            body = line[2:] if line.startswith("# ") else ""
            if key.match(body):
                keep = True
            elif not body.startswith(" "):
                keep = False
            if keep:
                text.append(body)
        assert text, role
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as handle:
            defaults = yaml.safe_load(handle)
        assert yaml.safe_load("\n".join(text)) == defaults, role
