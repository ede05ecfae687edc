# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One role's setting read by another role, as the role that owns it gives it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: setting
author:
  - gpufleet contributors (!UNKNOWN)
short_description: Another role's setting, as the role that owns it gives it
description:
  - Returns, for each variable name, the value the role of this collection that owns the variable works with, so a
    role that needs another role's setting reads it without repeating its default.
  - The owner is the role whose name, followed by C(_), is the longest prefix of the variable.
  - A value in the owner's C(vars/main.yml) (a value the owner derives) wins, as role variables do. Else the value
    the inventory or the play set. Else the owner's C(defaults/main.yml). Values are templated with the play's
    variables over the owner's defaults, under the owner's own variables.
  - A name that is neither in the owner's defaults nor in its variables fails, so a misspelt or removed setting is
    an error rather than an empty value.
options:
  _terms:
    description: Names of variables a role of this collection owns.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: The launcher image_security installs, where the inventory does not move it
  ansible.builtin.debug:
    msg: "{{ lookup('gpufleet.cluster.setting', 'image_security_launcher_path') }}"

- name: Several at once
  ansible.builtin.set_fact:
    hostfile_and_port: "{{ query('gpufleet.cluster.setting', 'interconnect_hostfile_path', 'ssh_hardening_port') }}"
"""

RETURN = r"""
_raw:
  description: The value of each name, in the order given.
  type: list
  elements: raw
"""

import os

import yaml

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core before 2.19: everything read from a file is templated
    def trust_as_template(value):
        return value

ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
_FILES = {}
_ROLES = {}


def _trusted(value):
    """Role files are part of this collection: their strings may be templated, like the role's own variables."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((key, _trusted(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def role_file(role, name, roles_dir=ROLES_DIR):
    """The mapping in roles/<role>/<name>/main.yml, its strings trusted as templates ({} when the file does not
    exist), read and trusted once per change of the file."""
    path = os.path.join(roles_dir, role, name, "main.yml")
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return {}
    cached = _FILES.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    with open(path) as handle:
        try:
            data = yaml.safe_load(handle) or {}
        except yaml.YAMLError as exc:
            raise AnsibleLookupError("%s does not parse: %s" % (path, exc))
    if not isinstance(data, dict):
        raise AnsibleLookupError("%s is not a mapping of variables" % path)
    data = _trusted(data)
    _FILES[path] = (stamp, data)
    return data


def roles_in(roles_dir=ROLES_DIR):
    """The role names of this collection, listed once per process."""
    if roles_dir not in _ROLES:
        _ROLES[roles_dir] = [entry for entry in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, entry))]
    return _ROLES[roles_dir]


def owner_of(name, roles_dir=ROLES_DIR):
    """The role of this collection whose name followed by `_` is the longest prefix of name, or None."""
    owners = [role for role in roles_in(roles_dir) if name.startswith(role + "_")]
    return max(owners, key=len) if owners else None


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        values = []
        for term in terms:
            if not isinstance(term, str):
                raise AnsibleLookupError("a setting's name must be a string, not %r" % (term,))
            role = owner_of(term)
            if role is None:
                raise AnsibleLookupError("%s belongs to no role of gpufleet.cluster (no role name is its prefix)" % term)
            defaults, derived = role_file(role, "defaults"), role_file(role, "vars")
            if term not in defaults and term not in derived:
                raise AnsibleLookupError("%s is not a setting of the %s role (neither in its defaults nor in its vars)"
                                         % (term, role))
            context = dict(defaults)
            context.update(variables)
            context.update(derived)
            templar = self._templar.copy_with_new_env(available_variables=context)
            values.append(templar.template(context[term]))
        return values
