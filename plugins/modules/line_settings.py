#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: line_settings
short_description: Set several key/value lines of one or more configuration files in one call
version_added: "0.1.0"
description:
  - Sets one line per key of O(settings) in O(path), each exactly as M(ansible.builtin.lineinfile) with
    O(ansible.builtin.lineinfile#module:regexp) and O(ansible.builtin.lineinfile#module:line) sets it. The last line
    the key's regular expression matches is replaced by the key's line; without a match, a line equal to it counts as
    set; otherwise it is added at the end of the file. The other lines are left as they are.
  - One module call for all the keys, where a M(ansible.builtin.lineinfile) loop costs one call per key on every
    run. The file is read once and, when a line differs, written once, through a temporary file in its directory
    moved over it, keeping its owner, group and mode.
  - O(files) does the same for several files in the one call, each with its own settings, regexp and line.
  - Fails, changing nothing, when a file does not exist (the package that ships it is missing), when a key,
    value or regexp cannot make a line, or when O(files) names a file twice. Every file is read and checked before
    the first is written.
  - Check mode reports what would change; diff mode returns each changed file before and after.
options:
  path:
    description: The file. It must exist. Give O(path) and O(settings), or O(files).
    type: path
  settings:
    description: Keys and their values, set in this order. A boolean value is written as C(true) or C(false).
    type: dict
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
  files:
    description: Several files, each set as O(path) and O(settings) set one.
    type: list
    elements: dict
    suboptions:
      path:
        description: The file. It must exist.
        type: path
        required: true
      settings:
        description: Keys and their values, set in this order.
        type: dict
        required: true
      regexp:
        description: As O(regexp), for this file.
        type: str
        default: "^{key}="
      line:
        description: As O(line), for this file.
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

- name: Set the debsums schedule and the sysstat switch in one call
  gpufleet.cluster.line_settings:
    files:
      - path: /etc/default/debsums
        settings: {CRON_CHECK: weekly}
      - path: /etc/default/sysstat
        settings: {ENABLED: '"true"'}
"""

RETURN = r"""
lines:
  description: The lines this call set or added (would set, in check mode), of every file.
  returned: always
  type: list
  elements: str
  sample: ["UMASK\t027"]
changed_paths:
  description: The files this call changed (would change, in check mode).
  returned: always
  type: list
  elements: str
  sample: ["/etc/login.defs"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import line_settings
from ansible_collections.gpufleet.cluster.plugins.module_utils.atomic_file import refuse_untrusted, write_beside


def plan(spec):
    """(path, text before, text after, lines set) for one file's spec; raises ValueError with the reason."""
    path = spec["path"]
    try:
        pairs = line_settings.expand(spec["settings"], spec["regexp"], spec["line"])
    except ValueError as exc:
        raise ValueError("%s: %s" % (path, exc))
    if not os.path.isfile(path):
        raise ValueError("%s does not exist (or is not a file): the package that ships it is not installed" % path)
    try:
        with open(path, newline="") as handle:
            before = handle.read()
    except (IOError, OSError, UnicodeDecodeError) as exc:
        raise ValueError("cannot read %s: %s" % (path, exc))
    after, changed_lines = line_settings.apply(before, pairs)
    return path, before, after, changed_lines


def main():
    file_options = dict(
        path=dict(type="path", required=True),
        settings=dict(type="dict", required=True),
        regexp=dict(type="str", default="^{key}="),
        line=dict(type="str", default="{key}={value}"),
    )
    module = AnsibleModule(
        # One file's options, at the top with path and settings not required (files may stand instead).
        argument_spec=dict(file_options, path=dict(type="path"), settings=dict(type="dict"),
                           files=dict(type="list", elements="dict", options=file_options)),
        mutually_exclusive=[("path", "files"), ("settings", "files")],
        required_one_of=[("path", "files")],
        required_together=[("path", "settings")],
        supports_check_mode=True,
    )
    params = module.params
    one_file = params["files"] is None
    specs = [dict((key, params[key]) for key in ("path", "settings", "regexp", "line"))] if one_file \
        else params["files"]
    paths = [spec["path"] for spec in specs]
    twice = sorted(set(path for path in paths if paths.count(path) > 1))
    if twice:
        module.fail_json(msg="files names %s more than once; nothing was changed" % ", ".join(twice))
    refuse_untrusted(module, paths)
    plans = []
    for spec in specs:  # every file is read and checked before the first one is written
        try:
            plans.append(plan(spec))
        except ValueError as exc:
            module.fail_json(msg="%s; nothing was changed" % exc)
    changes = [(path, before, after) for path, before, after, _lines in plans if after != before]
    result = dict(changed=bool(changes), lines=[line for _path, _before, _after, lines in plans for line in lines],
                  changed_paths=[path for path, _before, _after in changes])
    if one_file:
        result["path"] = plans[0][0]
    if module._diff and changes:
        diffs = [dict(before=before, after=after, before_header=path, after_header=path)
                 for path, before, after in changes]
        result["diff"] = diffs[0] if one_file else diffs
    if not module.check_mode:
        for path, _before, after in changes:
            write_beside(module, path, after)  # keeps the owner, group and mode of the file it replaces
    module.exit_json(**result)


if __name__ == "__main__":
    main()
