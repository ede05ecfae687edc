"""inventories/prod lists every role setting at its default: the samples follow the roles' defaults files."""
import subprocess
import sys

from conftest import ROOT


def test_prod_samples_follow_the_role_defaults():
    check = subprocess.run([sys.executable, "scripts/prod-defaults.py", "--check"], cwd=ROOT,
                           capture_output=True, check=False, text=True)
    assert check.returncode == 0, check.stdout
