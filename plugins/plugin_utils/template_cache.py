# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""A cache of compiled Jinja templates for ansible-playbook's workers, kept on the controller between runs.

Ansible forks a worker for every task, and the worker compiles every template and conditional it evaluates from
source (lexer, parser, Jinja's code generator, Python's compile): about 2,800 compiles and a fifth of the worker's
CPU in a 1-node no-op run of site.yml. The worker throws them away when the task ends, and the next run compiles
the same strings again. This module keeps the Python code Jinja generates, keyed by the SHA-256 of everything the
compile read: the source and whether it is a template or an expression; the Python, Jinja and ansible-core
versions; the environment's syntax, whitespace and code-generation settings and its finalize function; and
whether backslashes are escaped (ansible-core's compile context).

Jinja's code generator also reads one thing from outside the source: how each filter and test the template names
is called (with the context, the environment or neither, Jinja's pass_context and friends), and whether it exists
at all. The same name can mean another plugin in another collection search path, so every entry records, for each
filter and test its code names, what the compile saw; a hit is used only when each one is the same now, otherwise
the template is compiled again and the entry replaced. Those lookups are the ones rendering makes anyway.

Nothing else is kept: a template that fails to compile is compiled again each time, so its error is ansible-core's
own; templates loaded by name (include, import) and ansible-core's template debugging go the usual way.

Entries are read only from a directory of the user running Ansible that nobody else can write (the directory and
each one above it belong to that user or root and give no write access to others, unless sticky and root's, as
/tmp), only when the entry is a regular file of that user writable by nobody else. They are written atomically.
Entries unused for 30 days are removed when a run starts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import hashlib
import marshal
import os
import re
import stat
import sys
import time

from importlib.util import MAGIC_NUMBER

FORMAT = 1
MAX_AGE = 30 * 24 * 3600
# How generated code fetches a filter or test (Jinja 3.1's CodeGenerator.pull_dependencies).
DEPENDENCY = re.compile(r"environment\.(filters|tests)\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")
# Settings of the environment that the lexer, the parser or the code generator read.
SETTINGS = (
    "block_start_string", "block_end_string", "variable_start_string", "variable_end_string", "comment_start_string",
    "comment_end_string", "line_statement_prefix", "line_comment_prefix", "trim_blocks", "lstrip_blocks",
    "newline_sequence", "keep_trailing_newline", "autoescape", "optimized", "is_async", "sandboxed",
    "intercepted_binops", "intercepted_unops",
)


def default_root():
    """$XDG_CACHE_HOME/gpufleet/templates, else ~/.cache/gpufleet/templates."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpufleet", "templates")


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


def read_entry(directory, key):
    """The (dependencies, code) stored under key, or None when missing, foreign, writable by others or damaged."""
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
            entry = marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        if fd is not None:
            os.close(fd)
    if not isinstance(entry, tuple) or len(entry) != 3 or entry[0] != FORMAT or not isinstance(entry[1], tuple):
        return None
    return entry[1], entry[2]


def write_entry(directory, key, dependencies, code):
    """Store an entry atomically (a temporary file renamed into place); on failure nothing is left behind."""
    temp = os.path.join(directory, ".%s.%d" % (key, os.getpid()))
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(marshal.dumps((FORMAT, dependencies, code)))
        os.replace(temp, os.path.join(directory, key))
    except (OSError, ValueError):
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


def pass_arg(mapping, name):
    """What Jinja's code generator sees for a filter or test: (exists, how it is called)."""
    from jinja2.utils import _PassArg

    func = mapping.get(name)
    if func is None:
        return (False, None)
    how = _PassArg.from_obj(func)
    return (True, how.name if how is not None else None)


def dependencies_of(environment, python_source):
    """For each filter and test the generated code fetches: (kind, name, exists, how it is called)."""
    found = []
    for kind, literal in sorted(set(DEPENDENCY.findall(python_source))):
        name = ast.literal_eval(literal)
        found.append((kind, name) + pass_arg(getattr(environment, kind), name))
    return tuple(found)


def still_valid(environment, dependencies):
    """True when every filter and test is still what the compile saw."""
    for kind, name, exists, how in dependencies:
        if pass_arg(getattr(environment, kind), name) != (exists, how):
            return False
    return True


def _describe(value):
    """A stable text for a setting (a function by its module and name)."""
    if callable(value):
        from jinja2.utils import _PassArg

        how = _PassArg.from_obj(value)
        return "%s.%s:%s" % (getattr(value, "__module__", "?"), getattr(value, "__qualname__", "?"),
                             how.name if how is not None else "")
    if isinstance(value, (set, frozenset)):
        return repr(sorted(value))
    return repr(value)


class TemplateCache:
    """Compiled templates by key: in this process's memory, then in the directory."""

    def __init__(self, directory, versions):
        self.directory = directory
        self.versions = versions
        self.memory = {}
        self.hits = self.misses = 0

    def key(self, environment, kind, source, escape_backslashes):
        parts = [str(FORMAT), self.versions, type(environment).__module__, type(environment).__qualname__,
                 environment.code_generator_class.__qualname__,
                 _describe(environment.finalize), repr(sorted(environment.extensions)), repr(escape_backslashes), kind]
        parts.extend(_describe(getattr(environment, name, None)) for name in SETTINGS)
        digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass"))
        digest.update(b"\0\0")
        digest.update(source.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def lookup(self, environment, key):
        """The cached code for key when its filters and tests are unchanged, else None."""
        entry = self.memory.get(key)
        if entry is None and self.directory:
            entry = read_entry(self.directory, key)
        if entry is None or not still_valid(environment, entry[0]):
            return None
        self.memory[key] = entry
        return entry[1]

    def remember(self, environment, key, python_source, code):
        entry = (dependencies_of(environment, python_source), code)
        self.memory[key] = entry
        if self.directory:
            write_entry(self.directory, key, entry[0], code)


_saved = []


def versions():
    """The versions the generated code depends on."""
    import jinja2
    from ansible.release import __version__ as ansible_version

    return "py%s jinja2-%s ansible-core-%s" % (MAGIC_NUMBER.hex(), jinja2.__version__, ansible_version)


def install(root=None):
    """Route ansible-core's template and expression compiles through the cache; return the TemplateCache, or None
    when this ansible-core is not one it knows (nothing is changed then)."""
    try:
        from jinja2 import nodes
        from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext
    except ImportError:
        return None
    if getattr(AnsibleEnvironment, "_gpufleet_template_cache", None) is not None:
        return AnsibleEnvironment._gpufleet_template_cache
    if not all(hasattr(AnsibleEnvironment, name) for name in ("compile", "compile_expression", "_parse",
                                                              "_generate", "_compile",
                                                              "_debuggable_template_source")):
        return None
    directory = None
    if root != "":
        base = os.path.join(root or default_root(), "v%d-%s" % (FORMAT, hashlib.sha256(
            versions().encode()).hexdigest()[:16]))
        directory = make_directory(base)
        if directory:
            prune(directory)
    cache = TemplateCache(directory, versions())
    _saved[:] = [(name, AnsibleEnvironment.__dict__.get(name)) for name in ("compile", "compile_expression")]
    original_compile = AnsibleEnvironment.compile
    original_expression = AnsibleEnvironment.compile_expression
    pending = []

    def compile_expression(self, source, *args, **kwargs):
        pending.append(source)
        try:
            return original_expression(self, source, *args, **kwargs)
        finally:
            pending.pop()

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        if isinstance(source, str):
            kind, text = "template", source
        elif isinstance(source, nodes.Template) and pending and isinstance(pending[-1], str):
            kind, text = "expression", pending[-1]
            pending[-1] = None  # one expression, one compile
        else:
            kind = text = None
        if (text is None or raw or defer_init or name is not None or filename is not None
                or self._debuggable_template_source):
            return original_compile(self, source, name, filename, raw, defer_init)
        context = _TemplateCompileContext.current(optional=True)
        key = cache.key(self, kind, text, context.escape_backslashes if context else None)
        code = cache.lookup(self, key)
        if code is not None:
            cache.hits += 1
            return code
        cache.misses += 1
        python_source = original_compile(self, source, name, filename, True, defer_init)
        code = self._compile(python_source, "<template>")
        cache.remember(self, key, python_source, code)
        return code

    AnsibleEnvironment.compile = compile
    AnsibleEnvironment.compile_expression = compile_expression
    AnsibleEnvironment._gpufleet_template_cache = cache
    return cache


def uninstall():
    """Undo install() (for tests)."""
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment

    if getattr(AnsibleEnvironment, "_gpufleet_template_cache", None) is None:
        return
    for name, value in _saved:
        if value is None:
            delattr(AnsibleEnvironment, name)
        else:
            setattr(AnsibleEnvironment, name, value)
    AnsibleEnvironment._gpufleet_template_cache = None


if __name__ == "__main__":  # pragma: no cover
    sys.exit("a library of gpufleet.cluster's preload callback")
