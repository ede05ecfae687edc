# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What gpufleet.cluster.managed_files checks and compares, without Ansible: the task's item list (files, directories
and paths to remove), the state of one destination, and the diff entry of a changed file.

Shared by the managed_files action plugin (which checks the list before rendering, and on the controller itself
finds whether a set of controller files is already as asked) and the module (which checks it again on the node,
plans and writes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import grp
import hashlib
import os
import pwd
import re
import stat

# Ansible's default max_file_size_for_diff: a larger file's content is not put into the diff.
MAX_DIFF_BYTES = 104448

FILE_KEYS = ("src", "content", "copy", "dest", "state", "mode", "owner", "group", "validate", "diff")
# What the action plugin adds for a `copy` file, whose bytes it sends base64-encoded (they need not be UTF-8).
MODULE_KEYS = FILE_KEYS + ("content_base64",)
STATES = ("file", "directory", "absent")
SOURCES = ("src", "content", "copy")
# Keys an item of each state takes besides dest and state.
STATE_KEYS = {
    "file": ("src", "content", "copy", "content_base64", "mode", "owner", "group", "validate", "diff"),
    "directory": ("mode", "owner", "group", "diff"),
    "absent": ("diff",),
}

# An octal mode as a string ("0644", "644"), and one clause of a symbolic mode as chmod and Ansible's file modules
# take it (u=rw,g=r,o=).
_OCTAL_MODE = re.compile(r"^0?[0-7]{1,4}$")
_SYMBOLIC_CLAUSE = re.compile(r"^[ugoa]*(?:[-+=](?:[rwxXst]*|[ugo]))+$")


def checksum(data):
    """sha1 of bytes, the checksum ansible.builtin.copy and template report."""
    return hashlib.sha1(data).hexdigest()


def wanted_bytes(item):
    """The bytes a rendered file item asks for: content_base64 decoded, or content as UTF-8."""
    if item.get("content_base64") is not None:
        return base64.b64decode(item["content_base64"])
    return item["content"].encode("utf-8", "surrogateescape")


def mode_problem(mode):
    """None when mode is an octal number (int or string) or a symbolic mode; otherwise why it is not."""
    if mode is None or isinstance(mode, bool):
        return None if mode is None else "mode %r is neither octal nor symbolic" % (mode,)
    if isinstance(mode, int):
        return None if 0 <= mode <= 0o7777 else "mode %o is out of range" % mode
    text = str(mode)
    if _OCTAL_MODE.match(text):
        return None
    if text and all(_SYMBOLIC_CLAUSE.match(clause) for clause in text.split(",")):
        return None
    return "mode %r is neither octal nor symbolic" % (text,)


def _inside(path, top):
    """True when path lies below top (both normalised)."""
    return path != top and path.startswith(top.rstrip("/") + "/")


def item_problems(files, rendered=False):
    """Every reason the item list cannot be used, as messages naming the item; [] when it can.

    An item's state is file (the default), directory or absent. Before rendering (the action plugin) a file gives
    exactly one of src, content and copy; after it (the module, rendered True) every file carries content or
    content_base64. No destination may appear twice (one would silently win), and nothing may lie inside a path the
    same call removes (the removal would take it away again, or its directory would be gone).
    """
    if not isinstance(files, list):
        return ["files must be a list of files, got %s" % type(files).__name__]
    known = MODULE_KEYS if rendered else FILE_KEYS
    problems, seen, removed = [], {}, []
    for index, item in enumerate(files):
        where = "files[%d]" % index
        if not isinstance(item, dict):
            problems.append("%s is not a dictionary" % where)
            continue
        state = item.get("state") or "file"
        if state not in STATES:
            problems.append("%s: state must be one of %s, got %s" % (where, ", ".join(STATES), state))
            continue
        dest = item.get("dest")
        if not isinstance(dest, str) or not dest:
            problems.append("%s has no dest" % where)
        else:
            where = "%s (%s)" % (where, dest)
            normal = os.path.normpath(dest)
            if state == "file" and dest.endswith("/"):
                problems.append("%s: dest must name a file, not a directory" % where)
            if not os.path.isabs(dest):
                problems.append("%s: dest must be an absolute path" % where)
            elif normal == "/" and state != "directory":
                problems.append("%s: / cannot be a file or be removed" % where)
            if normal in seen:
                problems.append("%s: the same dest as files[%d]" % (where, seen[normal]))
            seen.setdefault(normal, index)
            if state == "absent":
                removed.append((index, normal))
        unknown = sorted(set(item) - set(known))
        if unknown:
            problems.append("%s: unknown keys %s (known: %s)" % (where, ", ".join(unknown), ", ".join(FILE_KEYS)))
        given = [key for key in known if key not in ("dest", "state") and item.get(key) is not None]
        misplaced = [key for key in given if key not in STATE_KEYS[state] and key not in unknown]
        if misplaced:
            problems.append("%s: state %s takes no %s" % (where, state, ", ".join(misplaced)))
        if state == "file":
            if rendered:
                contents = [key for key in ("content", "content_base64") if item.get(key) is not None]
                if item.get("src") is not None or item.get("copy") is not None:
                    problems.append("%s: src and copy are read by the managed_files action plugin on the controller, "
                                    "so the module needs content" % where)
                elif len(contents) != 1:
                    problems.append("%s has no content: src is rendered and copy is read by the managed_files action "
                                    "plugin on the controller, so the module needs content" % where if not contents
                                    else "%s has both content and content_base64" % where)
            elif len([key for key in SOURCES if item.get(key) is not None]) != 1:
                problems.append("%s needs exactly one of src, content and copy" % where)
        validate = item.get("validate")
        if validate is not None and "%s" not in str(validate):
            problems.append("%s: validate must contain %%s (the candidate file): %s" % (where, validate))
        problem = mode_problem(item.get("mode"))
        if problem:
            problems.append("%s: %s" % (where, problem))
    for index, top in removed:
        for other, normal in sorted((i, n) for n, i in seen.items()):
            if _inside(normal, top):
                problems.append("files[%d] (%s) lies inside %s, which files[%d] removes" % (other, normal, top, index))
    return problems


def dir_missing(path, planned=()):
    """True when the directory path should be in is neither there nor one of the planned (earlier directory items
    of the same call, normalised)."""
    parent = os.path.dirname(os.path.normpath(path)) or "."
    return not os.path.isdir(parent) and parent not in planned


def inspect(dest, data, planned=()):
    """State of dest against the wanted bytes: nothing is changed. Keys: exists, is_link, is_dir, dir_missing,
    before (current bytes or None), checksum (of data), content_changed. planned: the directories earlier items of
    the same call create, which count as there."""
    state = dict(exists=False, is_link=os.path.islink(dest), is_dir=False, before=None, checksum=checksum(data))
    state["dir_missing"] = dir_missing(dest, planned)
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


def path_kind(path):
    """What is at path, without following a link: absent, link, directory or file (anything else counts as file,
    as ansible.builtin.file reports it)."""
    if not os.path.lexists(path):
        return "absent"
    if os.path.islink(path):
        return "link"
    return "directory" if os.path.isdir(path) else "file"


def state_diff(path, before, after, **attributes):
    """The diff entry of a directory created or a path removed, in ansible.builtin.file's form."""
    after_state = dict(path=path, state=after)
    after_state.update((key, value) for key, value in attributes.items() if value is not None)
    return dict(before=dict(path=path, state=before), after=after_state, before_header=path, after_header=path)


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


def _id_of(value, by_name):
    """A uid or gid as ansible.builtin.file reads owner and group (digits are the number itself); None when the
    name is unknown."""
    if str(value).isdigit():
        return int(value)
    try:
        return by_name(value)
    except KeyError:
        return None


def owner_id(owner):
    """The uid of an owner name or number; None when no such user exists."""
    return _id_of(owner, lambda name: pwd.getpwnam(name).pw_uid)


def group_id(group):
    """The gid of a group name or number; None when no such group exists."""
    return _id_of(group, lambda name: grp.getgrnam(name).gr_gid)


def attributes_as_asked(path, owner, group, mode):
    """True when path (not followed) has the owner, group and octal mode asked for; None asked means any. A
    symbolic mode or an unknown name is never counted as matching (only the module may judge those)."""
    path_stat = os.lstat(path)
    if owner is not None and owner_id(owner) != path_stat.st_uid:
        return False
    if group is not None and group_id(group) != path_stat.st_gid:
        return False
    if mode is not None:
        if isinstance(mode, bool):
            return False
        if not isinstance(mode, int):
            if not _OCTAL_MODE.match(str(mode)):
                return False
            mode = int(str(mode), 8)
        if stat.S_IMODE(path_stat.st_mode) != mode:
            return False
    return True


def settled(files):
    """The module's per-item results when every rendered item of files is already as asked on this machine, read
    without changing anything; None when any item would change or needs the module's own judgement.

    Used by the action plugin when the module would run on the controller itself, as the same user: a run that
    changes nothing then costs no module process. Stricter than the module, never looser: a file must be a regular
    file (not a link) with exactly the wanted bytes, a directory a real directory (not a link to one), an absent
    path absent, every parent there, owner, group and mode equal (symbolic modes, unknown names, ~ and $ in paths
    go to the module). Any doubt returns None, and the module decides.
    """
    results = []
    for item in files:
        state = item.get("state") or "file"
        dest = item.get("dest")
        if not isinstance(dest, str) or not os.path.isabs(dest) or "~" in dest or "$" in dest:
            return None
        if item.get("diff") not in (None, True, False) or item.get("src") is not None or item.get("copy") is not None:
            return None
        if state != "file":
            dest = os.path.normpath(dest)
        try:
            if state == "file":
                # A missing file, a link, a directory and other bytes all count as a content change.
                found = inspect(dest, wanted_bytes(item))
                if found["content_changed"]:
                    return None
                result = dict(dest=dest, state=state, checksum=found["checksum"])
            elif path_kind(dest) != ("directory" if state == "directory" else "absent"):
                return None  # a link to a directory is for the module to judge
            else:
                result = dict(dest=dest, state=state)
            if state != "absent" and not attributes_as_asked(dest, item.get("owner"), item.get("group"),
                                                             item.get("mode")):
                return None
        except (IOError, OSError, TypeError, ValueError):
            return None
        result["changed"] = False
        results.append(result)
    return results
