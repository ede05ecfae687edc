# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What the container_runtime role refuses or warns about in a Docker daemon.json.

The work is done by plain functions (no Ansible state) so unit tests call them directly.
The filter's documentation is plugins/filter/daemon_json_review.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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


class FilterModule(object):
    """gpufleet Docker daemon helpers."""

    def filters(self):
        return {"daemon_json_review": as_filter(daemon_json_review)}
