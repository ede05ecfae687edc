"""Puts pip into an empty virtual environment for ansible-test, without a download of pip's get-pip.py.

ansible-test creates its virtual environments without pip and bootstraps pip by running get-pip.py, which it
downloads from a host outside the package index (unreachable where only the package index is). It looks for the
script in its cache first (~/.ansible/test/cache/get_pip_<version>.py), so scripts/sanity.sh puts this file there.
It does the same job with the Python standard library: ensurepip installs the pip wheel that ships with Python,
and that pip installs what ansible-test asked for (its pinned pip version) from the package index.

Arguments are the ones ansible-test passes to get-pip.py: pip options and requirements, plus get-pip.py's own
--no-setuptools / --no-wheel, which only mean "do not add setuptools or wheel" and are dropped here.
"""
import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main(argv):
    # ensurepip sets PIP_CONFIG_FILE=/dev/null in this process's environment (it installs from its own wheel);
    # the install below must see the machine's pip configuration (index, CA bundle) again.
    env = dict(os.environ)
    ensurepip.bootstrap()
    args = [arg for arg in argv if arg not in GET_PIP_ONLY]
    return subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
