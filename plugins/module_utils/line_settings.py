# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Key/value lines of a configuration file set the way ansible.builtin.lineinfile sets one: pure functions.

The module ``gpufleet.cluster.line_settings`` reads the file, calls ``apply`` and writes the result; the unit tests
call ``apply`` on text. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

KEY = "{key}"
VALUE = "{value}"


def expand(settings, regexp, line):
    """[(compiled regexp, line)] for each key of ``settings`` in order: ``{key}`` in ``regexp`` becomes the key with
    its regular-expression characters escaped, ``{key}`` and ``{value}`` in ``line`` the key and the value."""
    if KEY not in regexp:
        raise ValueError("regexp must contain {key}, got %r" % (regexp,))
    if KEY not in line or VALUE not in line:
        raise ValueError("line must contain {key} and {value}, got %r" % (line,))
    pairs = []
    for key, value in settings.items():
        key = str(key)
        if not key or "\n" in key or "\n" in str(value):
            raise ValueError("setting %r=%r: keys must be non-empty and neither may span lines" % (key, value))
        value = str(value).lower() if isinstance(value, bool) else str(value)
        try:
            pattern = re.compile(regexp.replace(KEY, re.escape(key)))
        except re.error as exc:
            raise ValueError("regexp %r for %s does not compile: %s" % (regexp, key, exc))
        pairs.append((pattern, line.replace(KEY, key).replace(VALUE, value)))
    return pairs


def apply(text, pairs):
    """``text`` with each (pattern, line) set as lineinfile's state=present with regexp sets it: the last line the
    pattern matches is replaced; without a match, a line equal to ``line`` counts as set; else ``line`` is added at
    the end. Returns (new text, [the lines that changed or were added])."""
    lines = text.splitlines(True)
    changed = []
    for pattern, new in pairs:
        bare = [existing.rstrip("\r\n") for existing in lines]
        matches = [index for index, existing in enumerate(bare) if pattern.search(existing)]
        if matches:
            index = matches[-1]
            ending = lines[index][len(bare[index]):] or "\n"
            if bare[index] != new:
                lines[index] = new + ending
                changed.append(new)
        elif new not in bare:
            if lines and not lines[-1].endswith(("\n", "\r")):
                lines[-1] += "\n"
            lines.append(new + "\n")
            changed.append(new)
    return "".join(lines), changed
