"""Where the collection's Python lives and what its filters are for (docs/development.md, "Modules").

- plugins/module_utils/ holds what the modules import, directly or through another module_utils file, since that
  code is shipped to the nodes with them; what only the controller's filters, lookups and action plugins import
  lives in plugins/plugin_utils/.
- Every filter is public API: a role or a playbook uses it, or a check that has no other tool for the job does.
- A filter takes its input and at most three arguments by position; anything more is a keyword (Jinja passes
  ``x | f(a=1, b=2)`` as keywords), so a call says what each value is.
"""
import ast
import glob
import inspect
import os
import re

from conftest import ROOT
from test_filter_docs import FILTERS

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


# module_utils written ahead of the module that will run them on the node: name, and the module it waits for. An
# entry has to go once a module imports the file (the test below fails while it is still listed).
AWAITING_MODULE = {}


def test_every_module_utils_file_is_imported_by_a_module():
    imported = imported_by_modules()
    assert sorted(set(names("module_utils")) - imported) == sorted(AWAITING_MODULE)
    assert sorted(set(AWAITING_MODULE) & imported) == [], "imported by a module now: drop it from AWAITING_MODULE"


def test_module_side_code_never_imports_plugin_utils():
    for kind in ("modules", "module_utils"):
        for name in names(kind):
            imports = collection_imports(os.path.join(PLUGINS, kind, name + ".py"))
            assert not [i for i in imports if i[0] != "module_utils"], "%s/%s.py imports %s" % (kind, name, imports)


# Filters no role or playbook uses, kept because a check has no other tool for the job: where, and why.
KEPT_FOR_CHECKS = {
    "ssh_kexinit": ("molecule/security/verify.yml",
                    "reads the algorithms the running sshd offers from `ssh -vv`; nothing builtin parses a server's "
                    "KEXINIT, and the role's sshd_runtime_drift reads it with the same code"),
}


def texts(*paths):
    for path in paths:
        full = os.path.join(ROOT, path)
        if os.path.isfile(full):
            yield path, open(full).read()
        for folder, _dirs, files in os.walk(full):
            for name in files:
                if name.endswith((".yml", ".yaml", ".j2")):
                    with open(os.path.join(folder, name)) as handle:
                        yield os.path.relpath(os.path.join(folder, name), ROOT), handle.read()


def filters_named(*paths):
    found = set()
    for _path, text in texts(*paths):
        found.update(re.findall(r"gpufleet\.cluster\.([a-z0-9_]+)", text))
    return found


def test_every_filter_is_used_by_a_role_or_playbook():
    used = filters_named("roles", "playbooks", "site.yml")
    unused = sorted(set(FILTERS) - used - set(KEPT_FOR_CHECKS))
    assert unused == [], "no role or playbook uses these filters: remove them, their docs and their tests"
    for name, (path, _why) in KEPT_FOR_CHECKS.items():
        assert name in FILTERS and name not in used, name
        assert name in filters_named(path), "%s is kept for %s, which no longer uses it" % (name, path)


def test_filters_take_at_most_three_arguments_by_position():
    crowded = {}
    for name, function in FILTERS.items():
        parameters = inspect.signature(function).parameters.values()
        positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) > 4:
            crowded[name] = positional
    assert crowded == {}, "make the options after the third argument keyword-only (*)"
