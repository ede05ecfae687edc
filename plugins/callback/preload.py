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
  - It prints nothing. If loading fails, it warns and the run goes on as without it.
  - Enabled in the project's C(ansible.cfg) with C(callbacks_enabled = gpufleet.cluster.preload).
author:
  - gpufleet contributors (!UNKNOWN)
requirements:
  - enable in configuration
"""

import gc
import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader, lookup_loader

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
        try:
            preload()
        except Exception as exc:  # pylint: disable=broad-except
            self._display.warning("gpufleet.cluster.preload could not load the collection's plugins (%s); tasks load "
                                  "them one worker at a time instead" % exc)

    def v2_playbook_on_play_start(self, play):
        freeze_heap()
