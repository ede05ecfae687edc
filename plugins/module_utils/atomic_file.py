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


def write_beside(module, path, content):
    """Write ``content`` (text, line endings as given) to ``path`` through a mkstemp file in the same directory
    (never a predictable name), moved over it with ``module.atomic_move``. atomic_move decides the attributes: an
    existing file keeps its owner, group and mode, a new one gets the default mode less the umask (a mode set on
    the temporary file would not survive the move). The temporary file is gone afterwards, whatever happens."""
    handle, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp",
                                   dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(handle, "w", newline="") as out:
            out.write(content)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
