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

Entries are kept as private_cache keeps them: read only from a folder of the user running Ansible that nobody else
can write, only when the entry is a regular file of that user writable by nobody else; written atomically; removed
after 30 days unused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import hashlib
import marshal
import os
import re
import sys

from importlib.util import MAGIC_NUMBER

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import private_cache

FORMAT = 1
# How generated code fetches a filter or test (Jinja 3.1's CodeGenerator.pull_dependencies).
DEPENDENCY = re.compile(r"environment\.(filters|tests)\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")
# Settings of the environment that the lexer, the parser or the code generator read.
SETTINGS = (
    "block_start_string", "block_end_string", "variable_start_string", "variable_end_string", "comment_start_string",
    "comment_end_string", "line_statement_prefix", "line_comment_prefix", "trim_blocks", "lstrip_blocks",
    "newline_sequence", "keep_trailing_newline", "autoescape", "optimized", "is_async", "sandboxed",
    "intercepted_binops", "intercepted_unops",
)


def read_entry(directory, key):
    """The (dependencies, code) stored under key, or None when missing, not to be trusted or damaged."""
    data = private_cache.read_private(directory, key)
    if data is None:
        return None
    try:
        entry = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(entry, tuple) or len(entry) != 3 or entry[0] != FORMAT or not isinstance(entry[1], tuple):
        return None
    return entry[1], entry[2]


def write_entry(directory, key, dependencies, code):
    private_cache.write_private(directory, key, marshal.dumps((FORMAT, dependencies, code)))


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
    if not private_cache.core_is_known():
        return None
    if not all(hasattr(AnsibleEnvironment, name) for name in ("compile", "compile_expression", "_parse",
                                                              "_generate", "_compile",
                                                              "_debuggable_template_source")):
        return None
    directory, stamp = None, versions()
    if root != "":
        base = os.path.join(root or private_cache.default_root("templates"), "v%d-%s" % (FORMAT, hashlib.sha256(
            stamp.encode()).hexdigest()[:16]))
        directory = private_cache.make_directory(base)
        if directory:
            private_cache.prune(directory)
    cache = TemplateCache(directory, stamp)
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


def share_plugin_lookups(warm=True):
    """Look each filter and test name up once per process instead of once per template environment.

    ansible-core gives every Templar a new environment whose filter and test maps (JinjaPluginIntercept) start empty,
    so a worker looks a name up again for each template; a name that is Jinja's own (default, join, length, defined)
    is first searched through every filter file of ansible.builtin. The functions found do not depend on the
    environment (ansible-core wraps each the same way), so the first lookup of a name in the process is kept for
    the others, until the plugin loader's caches are cleared (a new plugin folder), which starts the memo again. A
    name set on one environment (env.filters[name] = f) still wins there. With warm, the names ansible-core and
    Jinja define are looked up now, in ansible-playbook, so that every worker forked later inherits them.

    Returns the memo ({loader type: (loader cache, {name: function or None})}), or None when this ansible-core's
    JinjaPluginIntercept is not one this knows."""
    try:
        from ansible._internal._templating._errors import AnsibleTemplatePluginNotFoundError
        from ansible._internal._templating._jinja_bits import AnsibleEnvironment
        from ansible._internal._templating._jinja_plugins import JinjaPluginIntercept
    except ImportError:
        return None
    current = JinjaPluginIntercept.__dict__.get("__getitem__")
    if getattr(current, "gpufleet_memo", None) is not None:
        return current.gpufleet_memo
    if not private_cache.core_is_known():
        return None
    if current is None or not hasattr(JinjaPluginIntercept, "_wrap_and_set_func"):
        return None
    memo = {}

    def __getitem__(self, key):
        func = self._wrapped_funcs.get(key)
        if func is not None:
            return func
        loader = self._plugin_loader
        marker = getattr(loader, "_cached_non_collection_wrappers", None)
        entry = memo.get(loader.type)
        if entry is None or entry[0] is not marker:
            entry = memo[loader.type] = (marker, {})
        known = entry[1]
        if key in known:
            func = known[key]
            if func is None:
                raise AnsibleTemplatePluginNotFoundError(loader.type, key)
            self._wrapped_funcs[key] = func
            return func
        try:
            func = current(self, key)
        except AnsibleTemplatePluginNotFoundError:
            known[key] = None
            raise
        known[key] = func
        return func

    __getitem__.gpufleet_memo = memo
    __getitem__.gpufleet_original = current
    JinjaPluginIntercept.__getitem__ = __getitem__
    if warm:
        import jinja2.defaults

        environment = AnsibleEnvironment()
        for mapping, names in ((environment.filters, jinja2.defaults.DEFAULT_FILTERS),
                               (environment.tests, jinja2.defaults.DEFAULT_TESTS)):
            loader = mapping._plugin_loader
            names = set(names) | set(getattr(loader, "_cached_non_collection_wrappers", None) or ())
            for name in sorted(names):
                mapping.get(name)
    return memo


def warm_lexer():
    """Build Jinja's lexer for ansible-core's default template settings in this process, before the first worker
    forks. ansible-core keeps lexers in a class-level cache but builds the default one on first use; a worker forked
    before that builds it again (its regular expressions compiled anew), which a 1-node no-op of site.yml did in
    about half of its workers. Returns the cache key, or None when this ansible-core is not one this knows."""
    try:
        from ansible._internal._templating._engine import TemplateEngine
        from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TEMPLATE_OVERRIDE_FIELD_NAMES
    except ImportError:
        return None
    if not private_cache.core_is_known() or not hasattr(AnsibleEnvironment, "_lexer_cache"):
        return None
    environment = TemplateEngine().environment
    environment.lexer  # pylint: disable=pointless-statement  # the property builds and keeps it
    return tuple(getattr(environment, name) for name in _TEMPLATE_OVERRIDE_FIELD_NAMES)


def unshare_plugin_lookups():
    """Undo share_plugin_lookups() (for tests)."""
    from ansible._internal._templating._jinja_plugins import JinjaPluginIntercept

    current = JinjaPluginIntercept.__dict__.get("__getitem__")
    original = getattr(current, "gpufleet_original", None)
    if original is not None:
        JinjaPluginIntercept.__getitem__ = original


if __name__ == "__main__":  # pragma: no cover
    sys.exit("a library of gpufleet.cluster's preload callback")
