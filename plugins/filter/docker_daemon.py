# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What the container_runtime role refuses or warns about in a Docker daemon.json, and the limits Docker runs under.

The work is done by plain functions (no Ansible state) so unit tests call them directly.
The filters' documentation is plugins/filter/daemon_json_review.yml and plugins/filter/proc_limits.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

TLS_FILES = ("tlscacert", "tlscert", "tlskey")


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(item) for item in value]
    return [str(value)]


def tls_complete(config):
    """True when the daemon verifies clients: tlsverify true and the CA, certificate and key all named."""
    return config.get("tlsverify") is True and all(str(config.get(key) or "").strip() for key in TLS_FILES)


def daemon_json_review(config):
    """{'unsafe_hosts': TCP hosts without mutual TLS, 'insecure_registries': [...], 'tls_complete': bool}."""
    if not isinstance(config, dict):
        raise ValueError("daemon_json_review expects a daemon.json object, got %s" % type(config).__name__)
    complete = tls_complete(config)
    tcp = [host for host in _as_list(config.get("hosts")) if host.strip().lower().startswith("tcp://")]
    return {
        "unsafe_hosts": [] if complete else tcp,
        "insecure_registries": _as_list(config.get("insecure-registries")),
        "tls_complete": complete,
    }


# "Max locked memory         8388608              8388608              bytes     ": the name, then soft, hard and the
# units (none for the nice and realtime priorities), in the kernel's fixed columns.
_LIMIT_LINE = re.compile(r"^(Max [A-Za-z ]+?)\s{2,}(\S+)\s+(\S+)(?:\s+(\S+))?\s*$")


def proc_limits(text):
    """/proc/<pid>/limits text -> {'locked memory': {'soft': '8388608', 'hard': '8388608', 'units': 'bytes'}, ...}.

    Keys drop the leading "Max " and are lower case; values stay as printed ("unlimited" or a number)."""
    if not isinstance(text, str):
        raise ValueError("proc_limits expects the text of /proc/<pid>/limits, got %s" % type(text).__name__)
    limits = {}
    for line in text.splitlines():
        match = _LIMIT_LINE.match(line)
        if match:
            name, soft, hard, units = match.groups()
            limits[name[4:].strip().lower()] = {"soft": soft, "hard": hard, "units": units or ""}
    if not limits:
        raise ValueError("proc_limits found no 'Max ...' line: is this /proc/<pid>/limits?")
    return limits


class FilterModule(object):
    """gpufleet Docker daemon helpers."""

    def filters(self):
        return {"daemon_json_review": as_filter(daemon_json_review), "proc_limits": as_filter(proc_limits)}
