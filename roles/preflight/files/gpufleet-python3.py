# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet's Python for Ansible modules: the node's python3 with a bytecode cache for AnsiballZ payloads.

Ansible runs every module from a zip it sends along (the AnsiballZ payload) and imports the module and its
module_utils from that zip with zipimport, which never keeps bytecode: each module run compiles
ansible.module_utils.basic and the rest again, and Python's zipimport compiles every module twice (once to name its
file, once to run it). This interpreter imports from those payloads through a zipimporter that compiles each source
once and keeps the code in a cache of the user it runs as, keyed by the SHA-256 of the Python version's magic
number, the file's path inside the zip and its source: the same source always gives the same code, a changed source
is a new key, so nothing can be served stale.

The hook works through zipimport's find_spec and exec_module, which Python has had since 3.10 (Debian 12's 3.11 and
13's 3.13 are tested); an older Python imports through zipimport's own load_module, as python3 does, without the
cache.

The cache is used only when it is safe to read: the directory CACHE_ROOT/<uid> must belong to the user it runs as,
with no access for group or others, under a CACHE_ROOT that belongs to root and that nobody else can write; every
entry must belong to that user and be writable by nobody else. Otherwise (or on any error) it imports as Python
does. Entries are written atomically (a temporary file renamed into place). systemd-tmpfiles ages out entries
unused for 30 days (gpufleet-ansiballz.conf).

preflight installs it as /usr/local/libexec/gpufleet/python3, with the node's interpreter on its first line, and
points ansible_python_interpreter at it for the rest of the run (preflight_module_cache). It runs the script on
stdin (Ansible's pipelining) or `python3 SCRIPT [ARGS]`; arguments that start with an option go to the real
interpreter unchanged.
"""

import marshal
import os
import stat
import sys
import zipimport

from hashlib import sha256
from importlib.util import MAGIC_NUMBER

CACHE_ROOT = "/var/cache/gpufleet-ansiballz"
# Only Ansible's payloads: /tmp/ansible_<module>_payload_<random>/ansible_<module>_payload.zip
PAYLOAD_SUFFIX = "_payload.zip"


def cache_dir(root=CACHE_ROOT, uid=None):
    """The cache directory of the effective user, or None when it is missing or not safe to trust."""
    uid = os.geteuid() if uid is None else uid
    try:
        top = os.lstat(root)
        if not stat.S_ISDIR(top.st_mode) or top.st_uid != 0 or top.st_mode & 0o022:
            return None
        path = os.path.join(root, str(uid))
        own = os.lstat(path)
        if not stat.S_ISDIR(own.st_mode) or own.st_uid != uid or own.st_mode & 0o077:
            return None
    except OSError:
        return None
    return path


def load(directory, key):
    """The code object cached under key, or None."""
    try:
        fd = os.open(os.path.join(directory, key), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = None
            return marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        if fd is not None:
            os.close(fd)


def store(directory, key, code):
    """Cache code under key (atomically; a failure leaves nothing behind)."""
    temp = os.path.join(directory, ".%s.%d" % (key, os.getpid()))
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(temp, os.path.join(directory, key))
    except (OSError, ValueError):
        try:
            os.unlink(temp)
        except OSError:
            pass


class CachingZipImporter(zipimport.zipimporter):
    """zipimport's importer for one payload, compiling each source once and reading the code from the cache."""

    directory = None

    def _source_path(self, fullname):
        """The path inside the archive of the module's source (zipimport's table of contents says which)."""
        name = self.prefix + fullname.rpartition(".")[2]
        return name + ("/__init__.py" if self.is_package(fullname) else ".py")

    def get_filename(self, fullname):
        return os.path.join(self.archive, self._source_path(fullname))

    def get_code(self, fullname):
        path = self._source_path(fullname)
        filename = os.path.join(self.archive, path)
        try:
            source = self.get_data(filename)
        except OSError:  # no source in the zip, only bytecode: zipimport's own way
            return super().get_code(fullname)
        key = sha256(MAGIC_NUMBER + path.encode() + b"\0" + source).hexdigest()
        code = load(self.directory, key) if self.directory else None
        if code is None:
            code = compile(source, filename, "exec", dont_inherit=True)
            if self.directory:
                store(self.directory, key, code)
        else:
            fix_filename(code, filename)
        return code


def fix_filename(code, filename):
    """Point the cached code (and every code object in it) at this run's file, as the import system does for .pyc."""
    import _imp

    _imp._fix_co_filename(code, filename)


def payload_hook(path):
    """sys.path_hooks entry: the caching importer for Ansible payloads, nothing for any other path."""
    archive = path.split(PAYLOAD_SUFFIX, 1)
    if len(archive) != 2 or not os.path.basename(archive[0]).startswith("ansible_"):
        raise ImportError("not an AnsiballZ payload")
    return CachingZipImporter(path)


def install(directory):
    """Put the hook first on sys.path_hooks (it declines every path but a payload's)."""
    CachingZipImporter.directory = directory
    sys.path_hooks.insert(0, payload_hook)
    sys.path_importer_cache.clear()


def main():
    args = sys.argv[1:]
    if args and args[0].startswith("-"):
        # An option (-c, -m, -V): not a module's script; the real interpreter, unchanged.
        os.execv(sys.executable, [sys.executable] + args)
    install(cache_dir())
    if args:
        # `python3 SCRIPT ARGS` (Ansible without pipelining): run it as Python would, from its own directory.
        import runpy

        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
        runpy.run_path(args[0], run_name="__main__")
        return
    # The script on stdin, as a bare `python3` runs it: argv [''], '' first on sys.path, __file__ '<stdin>'.
    sys.argv = [""]
    sys.path[0] = ""
    source = sys.stdin.buffer.read()
    main_module = type(sys)("__main__")
    main_module.__loader__ = main_module.__spec__ = None
    main_module.__file__ = "<stdin>"
    sys.modules["__main__"] = main_module
    exec(compile(source, "<stdin>", "exec", dont_inherit=True), main_module.__dict__)


if __name__ == "__main__":
    main()
