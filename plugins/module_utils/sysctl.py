# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Kernel settings as sysctl sees them: the /proc/sys path of a key and values compared field by field.

Shared by the sysctl_settings module (which applies settings) and the lynis_audit module (which reads them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def normalize(value):
    """Compare values as sysctl does: whitespace-separated fields, booleans as 0/1."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value)
    return " ".join(str(value).split())


def proc_path(proc_root, key):
    """net.ipv4.conf.all.rp_filter -> <proc_root>/net/ipv4/conf/all/rp_filter (sysctl's own mapping)."""
    return os.path.join(proc_root, *key.split("."))


def read_live(proc_root, key):
    """The live value of key, normalized, or None when the kernel has no such entry (or it cannot be read)."""
    try:
        with open(proc_path(proc_root, key)) as handle:
            return normalize(handle.read())
    except (IOError, OSError):
        return None
