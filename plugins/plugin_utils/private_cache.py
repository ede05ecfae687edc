# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Private cache folders on the controller, for the preload callback's caches (template_cache, module_payload_cache).

A cache that Ansible will execute from must hold only what the user running it wrote. A folder is used only when it
belongs to that user with no access for group or others, and nobody else can replace it: each folder above belongs
to that user or root and is not writable by others, unless it is root's and sticky (as /tmp). An entry is read only
when it is a regular file (not a link) of that user that nobody else can write. Entries are written atomically (a
temporary file renamed into place), mode 0600. Entries unused for 30 days are removed when a run starts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import time

MAX_AGE = 30 * 24 * 3600
# The ansible-core releases whose internals the preload callback's caches and tasks in place hook (tested: 2.19.14);
# with any other they stay off.
KNOWN_CORE = ("2.19.",)


def core_is_known():
    from ansible.release import __version__

    return __version__.startswith(KNOWN_CORE)


def default_root(name):
    """$XDG_CACHE_HOME/gpufleet/<name>, else ~/.cache/gpufleet/<name>."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpufleet", name)


def _safe_above(path, uid):
    """True when nobody but uid or root can replace path: it and every directory above belong to uid or root and
    are not writable by others, unless root's and sticky (/tmp)."""
    while True:
        info = os.stat(path)
        if info.st_uid not in (uid, 0):
            return False
        if info.st_mode & 0o022 and not (info.st_mode & stat.S_ISVTX and info.st_uid == 0):
            return False
        above = os.path.dirname(path)
        if above == path:
            return True
        path = above


def trusted_directory(path, uid=None):
    """True when path is a directory of uid with no access for group or others that nobody else can replace."""
    uid = os.geteuid() if uid is None else uid
    path = os.path.abspath(path)
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
            return False
        return _safe_above(os.path.dirname(path), uid)
    except OSError:
        return False


def make_directory(path):
    """Create path (and what is missing above it, mode 0700) when nobody else could replace it; return it when it
    can be trusted, else None (and nothing is created under a folder others can write)."""
    path = os.path.abspath(path)
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    try:
        if existing != path and not _safe_above(existing, os.geteuid()):
            return None
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path if trusted_directory(path) else None


def read_private(directory, name):
    """The bytes of the entry, or None when it is missing, not a regular file, another user's or writable by
    others."""
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = None
            return handle.read()
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)


def write_private(directory, name, data):
    """Store an entry atomically (a temporary file renamed into place); on failure nothing is left behind."""
    temp = os.path.join(directory, ".%s.%d" % (name, os.getpid()))
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, os.path.join(directory, name))
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass


def prune(directory, max_age=MAX_AGE, now=None):
    """Remove entries (and temporary files left by a killed worker) not used for max_age seconds; return how many."""
    now = time.time() if now is None else now
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime > max_age:
                os.unlink(path)
                removed += 1
        except OSError:
            pass
    return removed
