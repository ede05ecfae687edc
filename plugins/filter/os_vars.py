# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""os_vars_files: the OS variable files a role looks for, most specific first; the one way every role loads them.

    - name: Load the variables of this operating system
      ansible.builtin.include_vars:
        file: "{{ lookup('ansible.builtin.first_found', gpufleet_node.os | gpufleet.cluster.os_vars_files(role_path)) }}"

``<role>/vars/<Id>-<major>.yml``, ``<Id>.yml``, then ``<family>.yml``, where ``<Id>`` is the os-release ID with its
first letter capitalised as Jinja's ``capitalize`` does it (``debian`` -> ``Debian``, ``rocky`` -> ``Rocky``) and
``<family>`` is Ansible's OS family (``Debian``, ``RedHat``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleFilterError


def os_vars_files(node_os, role_path):
    """gpufleet_node.os, the role's path -> absolute candidate paths under <role_path>/vars, most specific first."""
    if not isinstance(node_os, dict) or not all(node_os.get(key) for key in ("id", "major", "family")):
        raise AnsibleFilterError("os_vars_files expects gpufleet_node.os with id, major and family, got %r" % (node_os,))
    if not role_path:
        raise AnsibleFilterError("os_vars_files expects the role's path (role_path)")
    distribution = str(node_os["id"]).capitalize()
    names = ["%s-%s.yml" % (distribution, node_os["major"]), "%s.yml" % distribution, "%s.yml" % node_os["family"]]
    unique = []
    for name in names:
        if name not in unique:
            unique.append(name)
    return [os.path.join(str(role_path), "vars", name) for name in unique]


class FilterModule(object):
    def filters(self):
        return {"os_vars_files": os_vars_files}
