"""Where the collection's Python lives (docs/development.md, "Modules"): plugins/module_utils/ holds what the
modules import, directly or through another module_utils file, since that code is shipped to the nodes with
them; what only the controller's filters, lookups and action plugins import lives in plugins/plugin_utils/."""
import ast
import glob
import os

from conftest import ROOT

PLUGINS = os.path.join(ROOT, "plugins")
PREFIX = "ansible_collections.gpufleet.cluster.plugins."


def collection_imports(path):
    """(kind, name) of every gpufleet.cluster plugins.<kind>.<name> a Python file imports."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            parts = node.module[len(PREFIX):].split(".")
            if len(parts) == 1:  # from ...plugins.module_utils import a, b
                found.update((parts[0], alias.name) for alias in node.names)
            else:
                found.add((parts[0], parts[1]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX):
                    parts = alias.name[len(PREFIX):].split(".")
                    found.add((parts[0], parts[1]))
    return found


def names(kind):
    return sorted(os.path.splitext(os.path.basename(path))[0]
                  for path in glob.glob(os.path.join(PLUGINS, kind, "*.py")) if not path.endswith("__init__.py"))


def imported_by_modules():
    """The module_utils names the modules import, directly or through other module_utils files."""
    todo = [os.path.join(PLUGINS, "modules", name + ".py") for name in names("modules")]
    seen = set()
    while todo:
        for kind, name in collection_imports(todo.pop()):
            if kind == "module_utils" and name not in seen:
                seen.add(name)
                todo.append(os.path.join(PLUGINS, "module_utils", name + ".py"))
    return seen


def test_every_module_utils_file_is_imported_by_a_module():
    assert sorted(set(names("module_utils")) - imported_by_modules()) == []


def test_module_side_code_never_imports_plugin_utils():
    for kind in ("modules", "module_utils"):
        for name in names(kind):
            imports = collection_imports(os.path.join(PLUGINS, kind, name + ".py"))
            assert not [i for i in imports if i[0] != "module_utils"], "%s/%s.py imports %s" % (kind, name, imports)
