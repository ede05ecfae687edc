"""The ansible-core releases the controller-side tests run on, and what the collection says about them: .venv pins
one (requirements.txt), the Debian 13 container of `make core-latest` the newest (requirements-core-latest.txt).
meta/runtime.yml's requires_ansible admits both, and ansible-test finds an ignore file for each, with the same skips
(they are about the collection's content, not the release)."""
import os
import re

import ansible
import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import ROOT

REQUIREMENTS = ["requirements.txt", "requirements-core-latest.txt"]


def _core_pin(name):
    with open(os.path.join(ROOT, name)) as handle:
        pins = [re.match(r"^ansible-core==(\S+)$", line.split("#", 1)[0].strip()) for line in handle]
    pins = [match.group(1) for match in pins if match]
    assert len(pins) == 1, "%s pins ansible-core once: %s" % (name, pins)
    return Version(pins[0])


def _ignore_entries(version):
    path = os.path.join(ROOT, "tests", "sanity", "ignore-%d.%d.txt" % (version.major, version.minor))
    assert os.path.isfile(path), "ansible-test %d.%d reads %s" % (version.major, version.minor, path)
    with open(path) as handle:
        return [line.rstrip("\n") for line in handle if line.strip()]


@pytest.fixture(scope="module")
def tested():
    return {name: _core_pin(name) for name in REQUIREMENTS}


def test_the_container_runs_a_newer_release_than_the_venv(tested):
    assert tested["requirements-core-latest.txt"] > tested["requirements.txt"]


def test_requires_ansible_admits_every_tested_release(tested):
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        spec = SpecifierSet(yaml.safe_load(handle)["requires_ansible"])
    for name, version in tested.items():
        assert version in spec, "%s pins %s, outside requires_ansible %s" % (name, version, spec)
    # The lower bound is the oldest release tested, not an older one nobody ran.
    oldest = min(tested.values())
    assert Version("%d.%d.0" % (oldest.major, oldest.minor)) in spec
    assert Version("%d.%d.999" % (oldest.major, oldest.minor - 1)) not in spec


@pytest.mark.parametrize("name", REQUIREMENTS)
def test_each_tested_release_has_its_sanity_ignore_file(tested, name):
    assert _ignore_entries(tested[name]) == _ignore_entries(tested["requirements.txt"])


def test_this_process_runs_one_of_the_tested_releases(tested):
    running = Version(ansible.__version__)
    assert (running.major, running.minor) in {(version.major, version.minor) for version in tested.values()}
