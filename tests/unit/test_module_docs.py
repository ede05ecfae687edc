"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML that parses: caught here in seconds rather than by
`make sanity`'s validate-modules, which also compares the options with the argument_spec."""
import ast
import glob
import os

import pytest
import yaml

from conftest import ROOT

MODULES = sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


def blocks(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and \
                node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            found[node.targets[0].id] = node.value.value
    return found


@pytest.mark.parametrize("path", MODULES, ids=os.path.basename)
def test_module_documentation_parses(path):
    found = blocks(path)
    assert sorted(found) == ["DOCUMENTATION", "EXAMPLES", "RETURN"], path
    for name, text in found.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as error:
            pytest.fail("%s %s is not valid YAML: %s" % (os.path.basename(path), name, error))
    assert yaml.safe_load(found["DOCUMENTATION"])["options"] is not None
