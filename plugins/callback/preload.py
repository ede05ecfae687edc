# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Prepare ansible-playbook for its forked workers - the collection's plugins loaded once, the heap frozen
version_added: "0.1.0"
description:
  - Ansible runs every task in a worker process forked from C(ansible-playbook). A worker that templates a
    collection filter such as C(gpufleet.cluster.os_vars_files) first loads every filter file of the collection
    (Ansible cannot tell which file holds a filter without loading them), and compiles each from source, since the
    collection loader keeps no bytecode. That costs about 90 ms of controller CPU per task on the development VM,
    and the worker throws it away when the task ends.
  - This callback loads those plugin files (and the module_utils they import) in C(ansible-playbook) itself when
    the run starts. Every worker forked afterwards inherits them and loads nothing. What the plugins do is not
    changed.
  - At the start of each play it also collects the garbage of C(ansible-playbook)'s heap and freezes what is left
    (Python's C(gc.freeze)). A worker inherits that heap copy-on-write; without the freeze, a garbage collection in
    the worker walks every inherited object and writes to it, so the kernel copies those pages into the worker, for
    every task. Frozen objects are left out of the worker's collections. Objects freed by their reference count
    still go as before; the next play unfreezes, collects and freezes again, so nothing the run leaves in cycles
    piles up (one collection per play, about 50 ms). On 1-node no-op runs of C(site.yml) this took about 8% off
    the controller's CPU.
  - When the run starts it also routes ansible-core's template and conditional compiles through a cache of
    compiled Jinja templates kept between runs (O(template_cache)). Every worker compiles every template it
    evaluates from source, about 2,800 compiles in a 1-node no-op run of C(site.yml); with the cache a run
    compiles only the templates no earlier run compiled. An entry is keyed by the SHA-256 of the source and of
    everything else the compile reads (Python, Jinja and ansible-core versions, the environment's syntax and
    code-generation settings, the backslash escaping), and holds what each filter and test it names looked like to
    Jinja's code generator; when one differs now, the template is compiled again. Entries are read only from a
    directory of the user running Ansible that nobody else can write, and only when they are that user's files
    that nobody else can write; entries unused for 30 days are removed. Templates that fail to compile are never
    cached, so their errors are ansible-core's own. The cache hooks ansible-core 2.19's templating; with another
    ansible-core release it stays off (as do the payload cache and the shared lookups).
  - With O(template_cache), each filter and test name is also looked up once per process rather than once per
    template. ansible-core gives every template a new environment whose filter and test maps start empty, and a
    name that is Jinja's own (C(default), C(length), C(defined)) is first searched through every filter file of
    C(ansible.builtin). The functions do not depend on the environment; the memo starts again when the plugin
    loader's caches are cleared. The names ansible-core and Jinja define are looked up when the run starts, so
    every worker inherits them, and so does Jinja's lexer for the default template settings (ansible-core builds it
    on first use, and a worker forked before that built its own).
  - It also keeps the module payloads (AnsiballZ) that workers build between runs (O(module_payload_cache)). The
    first use of a module in a run builds its payload from the module and every module_utils file it imports (about
    0.3 s of CPU each, about 20 in a no-op run of C(site.yml)), and ansible-core throws them away when the run
    ends. When a run ends, each payload it built is stored with the SHA-256 of every file it was built from and
    where that file was found; when the next run starts, each payload whose files are all unchanged and found in
    the same places is handed to ansible-core as if the run had built it. The folder is chosen by ansible-core and
    Python versions and the collection paths; the cache stays off when module_utils folders of one's own are
    configured. The same rules as for templates keep other users' files out.
  - ansible-core looks up each task's role by the real path of the role's folder, resolving it again (C(realpath),
    one C(lstat) per path component) about 35 times per task result in C(ansible-playbook) itself. The callback
    remembers each role folder's real path for the run.
  - It decides a skipped task in C(ansible-playbook) itself (O(skip_in_place)). ansible-core forks a worker for
    every task and host, and the worker's first step is the task's condition; a worker forked only to find its
    condition false cost the controller about 15 ms of CPU, about 120 times per node in a no-op run of
    C(site.yml). For a task with a condition, no loop and no delegation, the callback takes the worker's steps up
    to that check in C(ansible-playbook), on copies (the task's connection settings over the play's, their magic
    variables, the condition); when the condition is false and nothing was warned, the worker's own skipped result
    goes through the same result queue, so registered variables, handlers, callbacks and statistics are
    ansible-core's. A true condition, an error or a warning goes to a worker as before, which evaluates the
    condition again (a condition whose lookup has side effects runs it twice when true).
  - It also runs a task whose action never leaves the controller (C(set_fact), C(assert), C(debug), C(fail),
    C(include_vars), C(validate_argument_spec)) in C(ansible-playbook) itself (O(run_in_place)), about 80 per node
    in a no-op run of C(site.yml). ansible-core's own C(TaskExecutor) runs it on copies of the task and its
    variables, as a worker would, and its result goes through the same queue. A loop, delegation, retries
    (C(until)), C(async) or a C(timeout) send the task to a worker, as does every other action.
  - It prints nothing. If loading fails, it warns and the run goes on as without it.
  - Enabled in the project's C(ansible.cfg) with C(callbacks_enabled = gpufleet.cluster.preload).
author:
  - gpufleet contributors (!UNKNOWN)
requirements:
  - enable in configuration
options:
  template_cache:
    description:
      - Keep compiled Jinja templates between runs, and look each filter and test name up once per process (see
        above). C(false) compiles every template and looks up every name in every worker, as ansible-core does.
    type: bool
    default: true
    env:
      - name: GPUFLEET_TEMPLATE_CACHE
    ini:
      - section: callback_preload
        key: template_cache
  template_cache_dir:
    description:
      - Where the compiled templates are kept; a folder per Python, Jinja and ansible-core version is made in it.
        The default is C($XDG_CACHE_HOME/gpufleet/templates), else C(~/.cache/gpufleet/templates). It is made
        with mode 0700; when it, or a folder above it, could be written by another user, nothing is read from or
        written to it and templates are compiled in the worker's memory only.
    type: path
    env:
      - name: GPUFLEET_TEMPLATE_CACHE_DIR
    ini:
      - section: callback_preload
        key: template_cache_dir
  module_payload_cache:
    description:
      - Keep module payloads between runs (see above). C(false) builds them in every run, as ansible-core does.
    type: bool
    default: true
    env:
      - name: GPUFLEET_MODULE_PAYLOAD_CACHE
    ini:
      - section: callback_preload
        key: module_payload_cache
  skip_in_place:
    description:
      - Decide a task's skip in C(ansible-playbook) itself, without forking a worker, when its condition is false
        (see above). C(false) forks a worker for it, as ansible-core does.
    type: bool
    default: true
    env:
      - name: GPUFLEET_SKIP_IN_PLACE
    ini:
      - section: callback_preload
        key: skip_in_place
  run_in_place:
    description:
      - Run a task whose action never leaves the controller (C(set_fact), C(assert), C(debug), C(fail),
        C(include_vars), C(validate_argument_spec)) in C(ansible-playbook) itself, without forking a worker (see
        above). C(false) forks a worker for it, as ansible-core does.
    type: bool
    default: true
    env:
      - name: GPUFLEET_RUN_IN_PLACE
    ini:
      - section: callback_preload
        key: run_in_place
  module_payload_cache_dir:
    description:
      - Where the payloads are kept; a folder per ansible-core and Python version and collection paths is made in
        it. The default is C($XDG_CACHE_HOME/gpufleet/payloads), else C(~/.cache/gpufleet/payloads). The same rules
        as for O(template_cache_dir) apply; when they fail, payloads are built as usual.
    type: path
    env:
      - name: GPUFLEET_MODULE_PAYLOAD_CACHE_DIR
    ini:
      - section: callback_preload
        key: module_payload_cache_dir
"""

import gc
import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader, lookup_loader
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import in_place, module_payload_cache, template_cache

COLLECTION = "gpufleet.cluster"
PACKAGE = "ansible_collections.gpufleet.cluster.plugins"


def plugin_names(kind):
    """The plugin files of one kind in the collection (their module names), sorted."""
    try:
        package = importlib.import_module("%s.%s" % (PACKAGE, kind))
    except ImportError:
        return []
    return sorted(name for _unused, name, ispkg in pkgutil.iter_modules(package.__path__) if not ispkg)


def preload():
    """Load every filter, lookup and action plugin file of the collection into Ansible's plugin caches; returns the
    names of the files."""
    loaded = ["filter/%s" % name for name in plugin_names("filter")]
    if loaded:
        # Looking up a collection filter loads every filter file of the collection into the loader's cache, the
        # file that holds it or not: a name no file defines loads them all and finds nothing.
        filter_loader.get_with_context("%s.gpufleet_preload" % COLLECTION)
    for loader, kind in ((lookup_loader, "lookup"), (action_loader, "action")):
        for name in plugin_names(kind):
            loader.get("%s.%s" % (COLLECTION, name), class_only=True)
            loaded.append("%s/%s" % (kind, name))
    return loaded


def remember_role_paths():
    """Resolve each role folder's real path once per run (ansible-core's Role.get_role_path resolves it on every
    call); returns the memo, or None when this ansible-core's Role has no get_role_path."""
    import os

    from ansible.playbook.role import Role

    original = Role.__dict__.get("get_role_path")
    if original is None:
        return None
    if getattr(original, "gpufleet_memo", None) is not None:
        return original.gpufleet_memo
    memo = {}

    def get_role_path(self):
        path = self._role_path
        real = memo.get(path)
        if real is None:
            real = memo[path] = os.path.realpath(path)
        return real

    get_role_path.gpufleet_memo = memo
    get_role_path.gpufleet_original = original
    Role.get_role_path = get_role_path
    return memo


def freeze_heap():
    """Collect the garbage of this process's heap, then freeze what is left so that the workers forked from it
    leave those objects (and their pages) alone; the objects frozen at the play before are collected again first."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._payloads = None
        try:
            preload()
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("gpufleet.cluster.preload could not load the collection's plugins (%s); tasks load "
                                  "them one worker at a time instead" % exc)

    def v2_playbook_on_start(self, playbook):
        self._payloads = None
        try:
            remember_role_paths()
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("gpufleet.cluster.preload could not remember the role paths (%s)" % exc)
        try:
            in_place.install(skip=self.get_option("skip_in_place"), run=self.get_option("run_in_place"))
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("gpufleet.cluster.preload could not set up tasks in place (%s); every task goes "
                                  "to a worker" % exc)
        if self.get_option("module_payload_cache"):
            try:
                self._payloads = module_payload_cache.install(self.get_option("module_payload_cache_dir"))
                if self._payloads is not None:
                    self._payloads.seed()
            except Exception as exc:  # pylint: disable=broad-except
                self._payloads = None
                self._display.warning("gpufleet.cluster.preload could not set up the module payload cache (%s); "
                                      "payloads are built as usual" % exc)
        if not self.get_option("template_cache"):
            return
        try:
            template_cache.share_plugin_lookups()
            template_cache.warm_lexer()
            if template_cache.install(self.get_option("template_cache_dir")) is None:
                self._display.vvv("gpufleet.cluster.preload: this ansible-core's templating is not one the template "
                                  "cache knows; templates are compiled as usual")
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("gpufleet.cluster.preload could not set up the template cache (%s); templates are "
                                  "compiled as usual" % exc)

    def v2_playbook_on_stats(self, stats):
        if self._payloads is None:
            return
        try:
            self._payloads.store()
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("gpufleet.cluster.preload could not keep this run's module payloads (%s)" % exc)

    def v2_playbook_on_play_start(self, play):
        freeze_heap()
