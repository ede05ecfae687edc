# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Replace a file's content atomically, for the modules that write one file of their own.

(``managed_files`` writes and validates every candidate before it moves any, and keeps its own temporary files.)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from ansible_collections.gpufleet.cluster.plugins.module_utils.trusted_path import untrusted_step


def refuse_untrusted(module, paths):
    """End the module, before anything is read or changed, when another account could replace a step of one of
    ``paths`` (trusted_path.untrusted_step): root then never follows a link such an account planted."""
    problems = [problem for problem in (untrusted_step(path) for path in paths) if problem]
    if problems:
        module.fail_json(msg="%s; nothing was changed" % "; ".join(problems), problems=problems)


def write_beside(module, path, content, mode=None):
    """Write ``content`` (text, line endings as given) to ``path`` through a mkstemp file in the same directory
    (never a predictable name), moved over it with ``module.atomic_move``. atomic_move decides the attributes: an
    existing file keeps its owner, group and mode, a new one gets the default mode less the umask (a mode set on
    the temporary file would not survive the move); ``mode``, when given, is set after the move. The temporary file
    is gone afterwards, whatever happens. A path another account could replace ends the module before anything is
    written (refuse_untrusted)."""
    refuse_untrusted(module, [path])
    handle, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp",
                                   dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(handle, "w", newline="") as out:
            out.write(content)
        module.atomic_move(tmp, path)
        if mode is not None:
            module.set_mode_if_different(path, mode, False)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
