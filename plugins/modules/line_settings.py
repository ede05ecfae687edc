#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: line_settings
short_description: Set several key/value lines of one configuration file in one call
version_added: "0.1.0"
description:
  - Sets one line per key of O(settings) in O(path), each exactly as M(ansible.builtin.lineinfile) with
    O(ansible.builtin.lineinfile#module:regexp) and O(ansible.builtin.lineinfile#module:line) sets it. The last line
    the key's regular expression matches is replaced by the key's line; without a match, a line equal to it counts as
    set; otherwise it is added at the end of the file. The other lines are left as they are.
  - One module call for all the keys, where a M(ansible.builtin.lineinfile) loop costs one call per key on every
    run. The file is read once and, when a line differs, written once, through a temporary file in its directory
    moved over it, keeping its owner, group and mode.
  - Fails, changing nothing, when O(path) does not exist (the package that ships it is missing), or when a key,
    value or O(regexp) cannot make a line.
  - Check mode reports what would change; diff mode returns the file before and after.
options:
  path:
    description: The file. It must exist.
    type: path
    required: true
  settings:
    description: Keys and their values, set in this order. A boolean value is written as C(true) or C(false).
    type: dict
    required: true
  regexp:
    description:
      - The regular expression, searched in each line without its line ending, that finds a key's current line.
        C({key}) stands for the key, its regular-expression characters escaped.
    type: str
    default: "^{key}="
  line:
    description: The line a key gets. C({key}) and C({value}) stand for the key and its value.
    type: str
    default: "{key}={value}"
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Set the login defaults
  gpufleet.cluster.line_settings:
    path: /etc/login.defs
    settings:
      UMASK: "027"
      PASS_MIN_DAYS: 1
    regexp: '^\s*#?\s*{key}\s'
    line: "{key}\t{value}"

- name: Set chkrootkit's daily options
  gpufleet.cluster.line_settings:
    path: /etc/chkrootkit/chkrootkit.conf
    settings: {RUN_DAILY: "true", DIFF_MODE: "true"}
    line: '{key}="{value}"'
"""

RETURN = r"""
lines:
  description: The lines this call set or added (would set, in check mode).
  returned: always
  type: list
  elements: str
  sample: ["UMASK\t027"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import line_settings
from ansible_collections.gpufleet.cluster.plugins.module_utils.atomic_file import write_beside


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            settings=dict(type="dict", required=True),
            regexp=dict(type="str", default="^{key}="),
            line=dict(type="str", default="{key}={value}"),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        pairs = line_settings.expand(module.params["settings"], module.params["regexp"], module.params["line"])
    except ValueError as exc:
        module.fail_json(msg="%s: %s; nothing was changed" % (path, exc))
    if not os.path.isfile(path):
        module.fail_json(msg="%s does not exist (or is not a file): the package that ships it is not installed; "
                             "nothing was changed" % path)
    try:
        with open(path, newline="") as handle:
            before = handle.read()
    except (IOError, OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read %s: %s; nothing was changed" % (path, exc))
    after, changed_lines = line_settings.apply(before, pairs)
    result = dict(changed=after != before, lines=changed_lines, path=path)
    if module._diff and result["changed"]:
        result["diff"] = dict(before=before, after=after, before_header=path, after_header=path)
    if result["changed"] and not module.check_mode:
        write_beside(module, path, after)  # keeps the owner, group and mode of the file it replaces
    module.exit_json(**result)


if __name__ == "__main__":
    main()
