# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""packages_missing: which of a role's packages an install task still has to look at.

    when: my_packages | gpufleet.cluster.packages_missing(preflight_packages | default(none)) | length > 0

``preflight_packages`` is what gpufleet.cluster.node_facts (``packages: true``) read at the start of this run, in
ansible.builtin.package_facts' shape (the preflight role sets it; it is never taken from the fact cache, so another
run's list is never used). A
package counts as present only when that list has it, and, for ``name=version`` specs, a version matching
the glob. Without package facts every name is missing, so the install task runs as it would without this
filter: the filter only ever skips a package module call whose outcome would be "no change".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch

from ansible.errors import AnsibleFilterError


def _spec(entry):
    """'name', 'name=1.2*' -> (name, version glob or None); anything else (>=, paths, URLs) -> None."""
    text = str(entry).strip()
    if not text or any(mark in text for mark in ("<", ">", "/", " ")):
        return None
    name, _sep, version = text.partition("=")
    return (name, version or None) if name else None


def packages_missing(names, installed):
    """The entries of ``names`` not installed according to ``installed`` (package_facts' shape)."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)):
        raise AnsibleFilterError("packages_missing expects a list of package names, got %r" % (names,))
    if not isinstance(installed, dict):
        return list(names)
    missing = []
    for entry in names:
        spec = _spec(entry)
        if spec is None:
            missing.append(entry)
            continue
        name, version = spec
        versions = [str(p.get("version", "")) for p in installed.get(name, []) if isinstance(p, dict)]
        if not versions or (version and not any(fnmatch.fnmatchcase(v, version) for v in versions)):
            missing.append(entry)
    return missing


class FilterModule(object):
    def filters(self):
        return {"packages_missing": packages_missing}
