# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Controller-side helper shared by the collection's filter plugins.

The pure functions in module_utils refuse bad input with ValueError and a sentence for the operator; a filter
must raise AnsibleFilterError instead, so the task fails with that sentence rather than a traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools

from ansible.errors import AnsibleFilterError


def as_filter(function, prefix=""):
    """``function`` as a filter: its ValueError becomes an AnsibleFilterError with the same message."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(prefix + str(exc))
    return wrapper
