"""Every filter the collection exports has documentation that ansible-doc renders.

The filters are read from the FilterModule classes of plugins/filter/*.py, so a filter added without its
plugins/filter/<name>.yml fails here. ansible-doc runs against this checkout (ansible.cfg's collections_path).
Beyond a description, each filter's documented options must be the parameters its function takes, those that may be
passed by position in the order `positional` gives, so the page cannot drift from the code.
"""
import glob
import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

ANSIBLE_DOC = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
FILTER_DIR = os.path.join(ROOT, "plugins", "filter")


def exported_filters():
    """{filter name: its callable} from every FilterModule of plugins/filter."""
    found = {}
    for path in sorted(glob.glob(os.path.join(FILTER_DIR, "*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        module = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.filter." + name)
        for filter_name, function in module.FilterModule().filters().items():
            assert filter_name not in found, "%s is exported twice" % filter_name
            found[filter_name] = function
    return found


FILTERS = exported_filters()


@pytest.fixture(scope="module")
def docs():
    """ansible-doc --json of every exported filter, in one call."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_DOC, "-t", "filter", "--json"] + ["gpufleet.cluster." + name for name in sorted(FILTERS)],
                          cwd=ROOT, env=env, capture_output=True, check=False, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_filters_are_found():
    # A broken import or an empty FilterModule would leave nothing to check.
    assert len(FILTERS) >= 40
    assert {"file_sd_targets", "nvidia_driver_plan", "cluster_known_hosts", "ddp_verdict"} <= set(FILTERS)


def test_every_filter_has_a_documentation_file_and_no_other():
    documented = set(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(FILTER_DIR, "*.yml")))
    assert sorted(set(FILTERS) - documented) == []
    assert sorted(documented - set(FILTERS)) == []


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_ansible_doc_renders_the_filter(docs, name):
    entry = docs["gpufleet.cluster." + name]
    doc = entry["doc"]
    # The filter's own page: a plugin file with DOCUMENTATION would give every filter in it the same page.
    assert doc["name"] == name
    assert doc["filename"].endswith(os.path.join("plugins", "filter", name + ".yml"))
    assert doc["short_description"].strip()
    assert doc["description"] and all(line.strip() for line in doc["description"])
    assert entry["examples"] and "gpufleet.cluster." + name in entry["examples"]
    assert entry["return"]["_value"]["description"]


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_documented_options_are_the_parameters(docs, name):
    doc = docs["gpufleet.cluster." + name]["doc"]
    parameters = list(inspect.signature(FILTERS[name]).parameters.values())
    # `positional` lists what may be passed by position; keyword-only parameters are options passed by name.
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert sorted(doc["options"]) == sorted(["_input"] + [p.name for p in parameters[1:]])
    assert [word.strip() for word in doc["positional"].split(",")] == ["_input"] + positional[1:]
    for option, spec in doc["options"].items():
        assert spec.get("description"), "%s: option %s has no description" % (name, option)
        assert spec.get("type"), "%s: option %s has no type" % (name, option)
