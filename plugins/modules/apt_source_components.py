#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_source_components
short_description: Add components to a release's existing apt entries, in place, in one call
version_added: "0.1.0"
description:
  - Reads every apt source file of the node (C(/etc/apt/sources.list), C(/etc/apt/sources.list.d/*.list) and
    C(*.sources), regular files only) and adds O(components) to the entries of O(codename) and its C(-updates) and
    C(-security) suites that carry C(main), in the one-line format and in deb822 stanzas alike, so the node never
    gets a second entry for a suite it already has. Disabled stanzas, comments, other releases and third-party
    repositories that reuse the codename as their suite are left alone (see C(add_apt_components) in
    C(plugins/module_utils/nvidia_driver.py)).
  - Returns how many entries of the release it found. With none, the caller adds the release itself from a mirror.
  - One module call where a find, a read of each file and a copy per edited file cost two calls or more on every run.
  - An edited file is written through a temporary file in its directory and moved over it, keeping its owner, group
    and mode. Check mode reports what would change; diff mode returns each edited file before and after.
options:
  codename:
    description: The release codename.
    type: str
    required: true
  components:
    description: The components every entry of the release must carry.
    type: list
    elements: str
    required: true
  root:
    description: Directory the files are found under (tests point it at a recorded tree).
    type: path
    default: /
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Add contrib, non-free and non-free-firmware to the release's entries
  gpufleet.cluster.apt_source_components:
    codename: "{{ gpufleet_node.os.codename }}"
    components: [contrib, non-free, non-free-firmware]
  register: apt_components
"""

RETURN = r"""
found:
  description: The entries of the release found in all the files (the Debian ones, those carrying C(main)).
  returned: always
  type: int
files:
  description: The source files read, in order.
  returned: always
  type: list
  elements: str
edited:
  description: The files this call edited (would edit, in check mode).
  returned: always
  type: list
  elements: str
"""

import fnmatch
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver as nd
from ansible_collections.gpufleet.cluster.plugins.module_utils.atomic_file import refuse_untrusted, write_beside

# Where apt reads its sources, and which names there are sources (what apt itself reads).
SOURCE_DIRS = ("etc/apt", "etc/apt/sources.list.d")
SOURCE_PATTERNS = ("sources.list", "*.list", "*.sources")


def source_files(root):
    """The regular files (not links) named like apt sources in SOURCE_DIRS under ``root``, sorted by path."""
    found = []
    for directory in SOURCE_DIRS:
        full = os.path.join(root, directory)
        if not os.path.isdir(full):
            continue
        for name in os.listdir(full):
            path = os.path.join(full, name)
            if any(fnmatch.fnmatch(name, p) for p in SOURCE_PATTERNS) and os.path.isfile(path) \
                    and not os.path.islink(path):
                found.append(path)
    return sorted(found)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            codename=dict(type="str", required=True),
            components=dict(type="list", elements="str", required=True),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    files = source_files(p["root"])
    refuse_untrusted(module, files)
    found, edits = 0, []
    for path in files:
        try:
            with open(path) as handle:
                text = handle.read()
        except (IOError, OSError, UnicodeDecodeError) as exc:
            module.fail_json(msg="cannot read the apt source %s: %s; nothing was changed" % (path, exc))
        result = nd.add_apt_components(text, p["codename"], p["components"])
        found += result["found"]
        if result["changed"]:
            edits.append((path, text, result["content"]))
    shown = [os.path.join("/", os.path.relpath(path, p["root"])) for path, _before, _after in edits]
    out = dict(changed=bool(edits), found=found, edited=shown,
               files=[os.path.join("/", os.path.relpath(path, p["root"])) for path in files])
    if module._diff and edits:
        out["diff"] = [dict(before=before, after=after, before_header=name, after_header=name)
                       for name, (_path, before, after) in zip(shown, edits)]
    if not module.check_mode:
        for path, _before, after in edits:
            write_beside(module, path, after)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
