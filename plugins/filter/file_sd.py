# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters that build Prometheus file_sd target lists and pick a node's monitoring address.

The work is done by plain functions (no Ansible state) so unit tests call them directly;
FilterModule only maps the names and turns ValueError into AnsibleFilterError.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: file_sd_targets
short_description: Prometheus file_sd target groups for gpufleet nodes
version_added: "0.1.0"
description:
  - Turns one dict per node (C(node), C(address), C(cluster), C(group), C(gpu_model), C(gpu_count),
    C(exporters) as a list of C({name, port})) into file_sd target groups, one per node and exporter,
    sorted by node then exporter, every label a string.
  - Companion filters in this file are C(gpufleet.cluster.file_sd_merge) (keep the entries of nodes
    this run did not reach, drop nodes no longer in the inventory), C(gpufleet.cluster.address_in_network)
    (the first of a node's addresses inside a CIDR) and C(gpufleet.cluster.gpu_summary) (GPU model and
    count from gpu_topology facts, else from gpufleet_node).
options:
  _input:
    description: One dict per node.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Build the target groups of the nodes in this play
  ansible.builtin.set_fact:
    groups_sd: "{{ nodes | gpufleet.cluster.file_sd_targets }}"
"""

RETURN = r"""
_value:
  description: "File_sd target groups, each C({targets: [host:port], labels: {...}})."
  type: list
  elements: dict
"""

import ipaddress
import json

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible installed
    AnsibleFilterError = ValueError

LABEL_KEYS = ("cluster", "group", "node", "exporter", "gpu_model", "gpu_count")


def _target(address, port):
    """host:port, with IPv6 literals in brackets."""
    address = str(address).strip()
    if not address:
        raise ValueError("empty address")
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise ValueError("port %r is not a number" % (port,))
    if not 0 < port < 65536:
        raise ValueError("port %d is outside 1-65535" % port)
    try:
        if ipaddress.ip_address(address).version == 6:
            return "[%s]:%d" % (address, port)
    except ValueError:
        pass  # a host name
    return "%s:%d" % (address, port)


def file_sd_targets(nodes):
    """One target group per node and exporter, sorted, labels as strings."""
    if not isinstance(nodes, (list, tuple)):
        raise ValueError("file_sd_targets expects a list of node dicts, got %s" % type(nodes).__name__)
    out = []
    for entry in nodes:
        if not isinstance(entry, dict):
            raise ValueError("file_sd_targets: %r is not a dict" % (entry,))
        node = str(entry.get("node") or "").strip()
        if not node:
            raise ValueError("file_sd_targets: an entry has no node name: %r" % (entry,))
        for exporter in entry.get("exporters") or []:
            try:
                target = _target(entry.get("address") or node, exporter.get("port"))
            except ValueError as exc:
                raise ValueError("file_sd_targets: %s exporter %s: %s" % (node, exporter.get("name"), exc))
            labels = {
                "cluster": entry.get("cluster", ""),
                "group": entry.get("group", ""),
                "node": node,
                "exporter": exporter.get("name", ""),
                "gpu_model": entry.get("gpu_model", ""),
                "gpu_count": entry.get("gpu_count", 0),
            }
            out.append({"targets": [target], "labels": dict((k, str(labels[k])) for k in LABEL_KEYS)})
    return sorted(out, key=_sort_key)


def _sort_key(group):
    labels = group.get("labels") or {}
    return (labels.get("node", ""), labels.get("exporter", ""), group.get("targets") or [])


def file_sd_merge(existing, fresh, inventory_hosts=None):
    """Target groups of fresh, plus those of existing for nodes fresh does not cover.

    existing is what the file held, parsed or as JSON text (anything that is not a list of
    target groups counts as empty, so a damaged file is rewritten);
    a node named in fresh replaces all its old groups; when inventory_hosts is given, old groups
    of nodes no longer in the inventory are dropped.
    """
    if isinstance(existing, (str, bytes)):
        try:
            existing = json.loads(existing or "[]")
        except ValueError:
            existing = []
    fresh = list(fresh or [])
    fresh_nodes = set((g.get("labels") or {}).get("node") for g in fresh)
    keep_hosts = None if inventory_hosts is None else set(inventory_hosts)
    kept = []
    if isinstance(existing, list):
        for group in existing:
            if not is_file_sd_group(group):
                continue
            node = group["labels"].get("node")
            if node in fresh_nodes:
                continue
            if keep_hosts is not None and node not in keep_hosts:
                continue
            kept.append(group)
    return sorted(kept + fresh, key=_sort_key)


def is_file_sd_group(group):
    """True for a valid Prometheus file_sd target group with string labels."""
    if not isinstance(group, dict) or set(group) - {"targets", "labels"}:
        return False
    targets = group.get("targets")
    labels = group.get("labels", {})
    return (
        isinstance(targets, list)
        and all(isinstance(t, str) and t for t in targets)
        and isinstance(labels, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
    )


def address_in_network(addresses, network):
    """The first address of the list inside network (a CIDR); '' when none is."""
    try:
        net = ipaddress.ip_network(str(network).strip(), strict=False)
    except ValueError:
        raise ValueError("%r is not a network in CIDR form (e.g. 10.20.0.0/24)" % (network,))
    for address in addresses or []:
        try:
            ip = ipaddress.ip_address(str(address).split("%")[0])
        except ValueError:
            continue
        if ip.version == net.version and ip in net:
            return str(ip)
    return ""


def gpu_summary(node_facts, topology=None):
    """{'gpu_model': ..., 'gpu_count': N} from gpu_topology facts when they list GPUs, else from gpufleet_node.

    Models from gpu_topology are the GPU names (several distinct names joined by '+'); from
    gpufleet_node they are the PCI ids ('10de:2330'), since sysfs carries no marketing name.
    """
    topology = topology if isinstance(topology, dict) else {}
    gpus = topology.get("gpus") or []
    if isinstance(gpus, list) and gpus:
        names = []
        for gpu in gpus:
            name = str((gpu or {}).get("name") or "unknown").strip()
            if name not in names:
                names.append(name)
        return {"gpu_model": "+".join(names), "gpu_count": len(gpus)}
    node_facts = node_facts if isinstance(node_facts, dict) else {}
    devices = node_facts.get("nvidia_gpus") or []
    ids = []
    for dev in devices:
        dev_id = str((dev or {}).get("device") or "").lower().replace("0x", "")
        name = "10de:%s" % dev_id if dev_id else "unknown"
        if name not in ids:
            ids.append(name)
    count = node_facts.get("gpu_count", len(devices)) or 0
    return {"gpu_model": "+".join(ids) if ids else "none", "gpu_count": int(count)}


def _wrap(func):
    def wrapped(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc))
    wrapped.__name__ = func.__name__
    wrapped.__doc__ = func.__doc__
    return wrapped


class FilterModule(object):
    """gpufleet Prometheus helpers."""

    def filters(self):
        return {
            "file_sd_targets": _wrap(file_sd_targets),
            "file_sd_merge": _wrap(file_sd_merge),
            "address_in_network": _wrap(address_in_network),
            "gpu_summary": _wrap(gpu_summary),
        }
