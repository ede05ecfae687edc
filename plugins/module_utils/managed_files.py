# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What gpufleet.cluster.managed_files checks and compares, without Ansible: the task's file list, the state of one
destination, and the diff entry of a changed file.

Shared by the managed_files action plugin (which checks the list before rendering) and the module (which checks it
again on the node, plans and writes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
import stat

# Ansible's default max_file_size_for_diff: a larger file's content is not put into the diff.
MAX_DIFF_BYTES = 104448

FILE_KEYS = ("src", "content", "dest", "mode", "owner", "group", "validate", "diff")

# One clause of a symbolic mode as chmod and Ansible's file modules take it (u=rw,g=r,o=).
_SYMBOLIC_CLAUSE = re.compile(r"^[ugoa]*(?:[-+=](?:[rwxXst]*|[ugo]))+$")


def checksum(data):
    """sha1 of bytes, the checksum ansible.builtin.copy and template report."""
    return hashlib.sha1(data).hexdigest()


def mode_problem(mode):
    """None when mode is an octal number (int or string) or a symbolic mode; otherwise why it is not."""
    if mode is None or isinstance(mode, bool):
        return None if mode is None else "mode %r is neither octal nor symbolic" % (mode,)
    if isinstance(mode, int):
        return None if 0 <= mode <= 0o7777 else "mode %o is out of range" % mode
    text = str(mode)
    if re.match(r"^0?[0-7]{1,4}$", text):
        return None
    if text and all(_SYMBOLIC_CLAUSE.match(clause) for clause in text.split(",")):
        return None
    return "mode %r is neither octal nor symbolic" % (text,)


def item_problems(files, rendered=False):
    """Every reason the file list cannot be used, as messages naming the item; [] when it can.

    Before rendering (the action plugin) an item gives exactly one of src and content; after it (the module, rendered
    True) every item carries content. No destination may appear twice: one would silently win.
    """
    if not isinstance(files, list):
        return ["files must be a list of files, got %s" % type(files).__name__]
    problems, seen = [], {}
    for index, item in enumerate(files):
        where = "files[%d]" % index
        if not isinstance(item, dict):
            problems.append("%s is not a dictionary" % where)
            continue
        dest = item.get("dest")
        if not isinstance(dest, str) or not dest:
            problems.append("%s has no dest" % where)
        else:
            where = "%s (%s)" % (where, dest)
            if dest.endswith("/"):
                problems.append("%s: dest must name a file, not a directory" % where)
            normal = os.path.normpath(dest)
            if normal in seen:
                problems.append("%s: the same dest as files[%d]" % (where, seen[normal]))
            seen.setdefault(normal, index)
        unknown = sorted(set(item) - set(FILE_KEYS))
        if unknown:
            problems.append("%s: unknown keys %s (known: %s)" % (where, ", ".join(unknown), ", ".join(FILE_KEYS)))
        has_src, has_content = item.get("src") is not None, item.get("content") is not None
        if rendered:
            if not has_content:
                problems.append("%s has no content: src is rendered by the managed_files action plugin on the "
                                "controller, so the module needs content" % where)
        elif has_src == has_content:
            problems.append("%s needs exactly one of src and content" % where)
        validate = item.get("validate")
        if validate is not None and "%s" not in str(validate):
            problems.append("%s: validate must contain %%s (the candidate file): %s" % (where, validate))
        problem = mode_problem(item.get("mode"))
        if problem:
            problems.append("%s: %s" % (where, problem))
    return problems


def inspect(dest, data):
    """State of dest against the wanted bytes: nothing is changed. Keys: exists, is_link, is_dir, dir_missing,
    before (current bytes or None), checksum (of data), content_changed."""
    state = dict(exists=False, is_link=os.path.islink(dest), is_dir=False, before=None, checksum=checksum(data))
    state["dir_missing"] = not os.path.isdir(os.path.dirname(dest) or ".")
    if os.path.lexists(dest):
        state["exists"] = True
        if os.path.isdir(dest):
            state["is_dir"] = True
        elif not state["is_link"] and stat.S_ISREG(os.stat(dest).st_mode):
            with open(dest, "rb") as handle:
                state["before"] = handle.read()
    # A link is replaced by a regular file, as ansible.builtin.template does without follow.
    state["content_changed"] = state["is_link"] or state["before"] is None or state["before"] != data
    return state


def _shown(data, dest):
    if len(data) > MAX_DIFF_BYTES:
        return "(%s is larger than %d bytes: content not shown)\n" % (dest, MAX_DIFF_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "(%s is not UTF-8 text: content not shown)\n" % dest


def content_diff(dest, state, data, show=True):
    """The diff entry of a content change: before and after as text, or placeholders where the file asks for its
    content to stay out of the output (show False), is too large or is not text."""
    if state["is_link"]:
        before = "(%s is a symbolic link to %s; it is replaced by a file)\n" % (dest, os.readlink(dest))
    elif state["before"] is None:
        before = "(%s is not a regular file)\n" % dest if state["exists"] else ""
    elif show:
        before = _shown(state["before"], dest)
    else:
        before = "(content hidden: diff is false for this file)\n"
    after = _shown(data, dest) if show else "(new content hidden: diff is false for this file)\n"
    return dict(before=before, after=after, before_header=dest, after_header=dest)
