# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Whether another account could replace a path a module is about to write, chown, chmod or remove (no Ansible
import).

gpufleet's modules write as root. A path is only as safe as every directory on the way to it: an account that owns
one of them, or may write to it, can swap what lies below for a symbolic link between any check and the write, and
root then writes, chowns or chmods whatever the link names (a user's ``~/.ssh`` made a link to ``/usr/local/bin``).
``untrusted_step`` walks the path one component at a time, following links the way the kernel would, and accepts it
only when every directory on the way, and every link, belongs to root or to the account the module runs as, and no
directory can be written by its group or by others (a sticky directory such as ``/tmp`` excepted: there others can
add names but cannot rename or remove those of root). Then no other account can change any step between this check
and the write, so the path-based calls after it are safe. Work in another account's files is done as that account
(``become_user``), where the kernel's own permission checks bound what a link can reach.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

# The kernel's own limit on links followed in one lookup.
MAX_LINKS = 40


def _who(uid):
    try:
        import pwd
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (KeyError, ImportError):
        return "uid %d" % uid


def untrusted_step(path, uid=None, follow_last=False, lstat=os.lstat, readlink=os.readlink):
    """None when no account but root and ``uid`` (the module's own, by default) can replace any step of ``path``;
    otherwise a sentence naming the first step that another account controls.

    Every directory on the way must be owned by root or ``uid`` and not be writable by its group or others unless it
    is sticky; every symbolic link on the way must be owned by root or ``uid``, and its target is walked in turn.
    The last component itself is not followed unless ``follow_last`` (a directory item whose link counts as the
    directory, which it does only when root owns the link): a file is replaced by a rename, a path removed by
    unlink, inside a directory already checked. A step
    that does not exist ends the walk: what is missing is made by the caller inside a checked directory.
    """
    uid = os.geteuid() if uid is None else uid
    trusted = (0, uid)
    if not os.path.isabs(path):
        return "%s is not an absolute path" % path
    todo = [part for part in os.path.normpath(path).split("/") if part]
    current, links = "/", 0
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, name)
        try:
            info = lstat(step)
        except OSError:
            return None
        last = not todo
        if stat.S_ISLNK(info.st_mode):
            if last and not follow_last:
                return None
            if last and info.st_uid != 0:
                return ("%s is a symbolic link that %s owns (to %s): a directory gpufleet manages is a real directory "
                        "or a link root owns; remove the link and run again" % (step, _who(info.st_uid), readlink(step)))
            if info.st_uid not in trusted:
                return ("%s is a symbolic link that %s owns: it could point anywhere, and root does not follow it"
                        % (step, _who(info.st_uid)))
            links += 1
            if links > MAX_LINKS:
                return "%s: too many symbolic links on the way" % path
            target = readlink(step)
            if target.startswith("/"):
                current = "/"
            todo = [part for part in target.split("/") if part] + todo
            continue
        if last or not stat.S_ISDIR(info.st_mode):
            return None
        if info.st_uid not in trusted:
            return ("%s belongs to %s, who could replace what lies below it; root does not write there (do that "
                    "work as that account, with become_user)" % (step, _who(info.st_uid)))
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return ("%s can be written by %s, who could replace what lies below it; root does not write there "
                    "(if nobody else should, run chmod go-w on it)"
                    % (step, "its group" if info.st_mode & stat.S_IWGRP else "every account"))
        current = step
    return None
