"""Evaluate a role's check task (an ansible.builtin.assert) the way a play would, without a play.

The task's own `vars`, `that` conditions and `fail_msg` are rendered with Jinja2 and Ansible's own filters and tests,
the collection's filters (their dotted names made plain identifiers, as Jinja2 cannot parse them) and the role's
variables: what the test sets, else the role's vars/main.yml and defaults/main.yml, else the shared settings of
roles/gpufleet_defaults (the role every role depends on), templated on use. A loop task gives one result per item.
So a test feeds a setting and sees whether the role's first task refuses it, and with which message.
"""
import os
import re

import jinja2
import jinja2.meta
import jinja2.nativetypes
import yaml

from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
from ansible.plugins.test.core import TestModule as CoreTests
from ansible.plugins.test.files import TestModule as FileTests
from ansible.plugins.test.mathstuff import TestModule as MathTests

from conftest import ROOT

ROLES = os.path.join(ROOT, "roles")
SHARED = "gpufleet_defaults"
FILTER_MODULES = ("cluster", "input_policy", "ssh", "nvidia_driver", "gpu_policy", "packages", "file_sd", "dcgm")
DOTTED = re.compile(r"\b(gpufleet\.cluster|ansible\.builtin)\.([a-z_]+)")
# What a play would give the check tasks: a Debian 13 node named node1 in a two-node fleet.
PLAY = {
    "inventory_hostname": "node1",
    "groups": {"all": ["node1", "node2"], "gpu_nodes": ["node1", "node2"]},
    "ansible_play_hosts_all": ["node1"],
    "hostvars": {"node1": {"ansible_host": "10.0.0.11"}, "node2": {"ansible_host": "10.0.0.12"}},
    "gpufleet_node": {"os": {"family": "Debian", "id": "debian", "codename": "trixie", "major": "13"},
                      "machine": "x86_64", "container": False, "gpu_count": 0},
    "ansible_check_mode": False,
    "playbook_dir": "/srv/gpufleet",
    "inventory_dir": "/srv/gpufleet/inventories/prod",
}


def _plain(text):
    return DOTTED.sub(lambda m: ("gpufleet_" if m.group(1) == "gpufleet.cluster" else "") + m.group(2), text)


def _load(*parts):
    path = os.path.join(ROLES, *parts)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


class RoleVariables(object):
    """The variables a role's task sees: the test's settings, else the play's, else role vars, else its defaults,
    else the shared defaults."""

    def __init__(self, role, settings):
        self.role = role
        self.settings = dict(PLAY, **settings)
        self.cache = {}
        self.env = environment(native=True)

    def get(self, name):
        if name in self.settings:
            return self.settings[name]
        if name not in self.cache:
            for source in (_load(self.role, "vars", "main.yml"), _load(self.role, "defaults", "main.yml"),
                           _load(SHARED, "defaults", "main.yml")):
                if name in source:
                    self.cache[name] = jinja2.ChainableUndefined(name=name)  # a cycle reads as undefined
                    self.cache[name] = self.render(source[name])
                    break
            else:
                return jinja2.ChainableUndefined(name=name)
        return self.cache[name]

    def context(self, text, local=None):
        local = local or {}
        names = jinja2.meta.find_undeclared_variables(self.env.parse(text))
        return dict((name, local[name] if name in local else self.get(name)) for name in names)

    def render(self, value, local=None):
        if isinstance(value, str):
            if "{{" not in value and "{%" not in value:
                return value
            text = _plain(value)
            return self.env.from_string(text).render(**self.context(text, local))
        if isinstance(value, list):
            return [self.render(item, local) for item in value]
        if isinstance(value, dict):
            return dict((key, self.render(item, local)) for key, item in value.items())
        return value

    def condition(self, expression, local):
        text = _plain(expression)
        return bool(self.env.compile_expression(text)(**self.context("{{ %s }}" % text, local)))

    def text(self, value, local):
        text = _plain(value)
        return environment().from_string(text).render(**self.context(text, local))


def environment(native=False):
    kind = jinja2.nativetypes.NativeEnvironment if native else jinja2.Environment
    env = kind(undefined=jinja2.ChainableUndefined)
    # Ansible's own default filter works on its own undefined type; Jinja2's is the same filter for this one.
    env.filters.update((name, function) for name, function in CoreFilters().filters().items() if name not in ("default", "d"))
    env.filters.update(MathFilters().filters())
    env.tests.update(CoreTests().tests())
    env.tests.update(MathTests().tests())
    env.tests.update(FileTests().tests())
    for module in FILTER_MODULES:
        plugin = __import__("ansible_collections.gpufleet.cluster.plugins.filter." + module, fromlist=["FilterModule"])
        for name, function in plugin.FilterModule().filters().items():
            env.filters["gpufleet_" + name] = function
    return env


def find_task(role, file_name, name):
    tasks = _load(role, "tasks", file_name)
    for task in tasks:
        if task.get("name") == name:
            return task
    raise AssertionError("no task %r in roles/%s/tasks/%s" % (name, role, file_name))


def check(role, file_name, task_name, **settings):
    """[(passed, message)] of the role's check task with these settings: one pair, or one per loop item."""
    task = find_task(role, file_name, task_name)
    variables = RoleVariables(role, settings)
    local = {}
    for name, value in (task.get("vars") or {}).items():
        local[name] = variables.render(value, local)
    assertion = task["ansible.builtin.assert"]
    that = assertion["that"] if isinstance(assertion["that"], list) else [assertion["that"]]
    items = variables.render(task["loop"], local) if "loop" in task else [None]
    loop_var = (task.get("loop_control") or {}).get("loop_var", "item")
    results = []
    for item in items:
        scope = dict(local, **({loop_var: item} if item is not None else {}))
        passed = all(variables.condition(condition, scope) for condition in that)
        results.append((passed, "" if passed else variables.text(assertion.get("fail_msg", ""), scope)))
    return results


def refusal(role, file_name, task_name, **settings):
    """The message the check task fails with for these settings, or '' when it passes."""
    return " | ".join(message for passed, message in check(role, file_name, task_name, **settings) if not passed)
