# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters that build Prometheus file_sd target lists, pick the exporters' listen address and write their
web (TLS/basic auth) and scrape settings.

The work is done by plain functions (no Ansible state) so unit tests call them directly;
FilterModule only maps the names and turns ValueError into AnsibleFilterError.

Each filter's documentation is plugins/filter/<filter name>.yml (ansible-doc -t filter gpufleet.cluster.<name>).
This file carries no DOCUMENTATION: ansible-doc would show it for every filter here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

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
            ip = ipaddress.ip_address(str(address).split("%", 1)[0])
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


BCRYPT_RE = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")
USER_RE = re.compile(r"^[^:\s]+$")


def _ip_or_none(value):
    try:
        return ipaddress.ip_address(str(value).split("%", 1)[0].strip())
    except ValueError:
        return None


def exporter_listen_address(addresses, *, monitoring_network="", cluster_address="", cluster_network="",
                            listen_all=False, host="this node"):
    """The address the exporters bind to; '' means every address. Every argument after the addresses is a keyword.

    In order: listen_all (explicit opt-in) gives ''; the node's address in monitoring_network (a node
    without one is refused); cluster_address when it is an IP the node holds; the node's address in
    cluster_network. Anything else is refused: an exporter without authentication on every address
    hands the metrics to whoever reaches the node.
    """
    if listen_all:
        return ""
    addresses = [a for a in (addresses or []) if _ip_or_none(a) is not None]
    shown = ", ".join(str(a) for a in addresses) or "none"
    monitoring_network = str(monitoring_network or "").strip()
    if monitoring_network:
        found = address_in_network(addresses, monitoring_network)
        if not found:
            raise ValueError(
                "%s has no address in the monitoring network %s (gpufleet_monitoring_network); its addresses are "
                "%s. Fix the inventory or the node's network. Nothing was changed." % (host, monitoring_network, shown))
        return found
    wanted = _ip_or_none(cluster_address or "")
    if wanted is not None:
        for address in addresses:
            if _ip_or_none(address) == wanted:
                return str(wanted)
    cluster_network = str(cluster_network or "").strip()
    if cluster_network:
        found = address_in_network(addresses, cluster_network)
        if found:
            return found
    raise ValueError(
        "%s: the exporters have no address to bind to: no monitoring network (gpufleet_monitoring_network), and "
        "the cluster address %r (gpufleet_cluster_address, else ansible_host) is not an IP of the node nor is any "
        "of its addresses (%s) in the cluster network %r (gpufleet_cluster_network). Set one of them, or set "
        "gpu_monitoring_listen_all: true to listen on every address, which shows the metrics to anyone who can "
        "reach the node. Nothing was changed." % (host, str(cluster_address or ""), shown, cluster_network))


def listen_host(address):
    """Host part of a listen flag: IPv6 in brackets, '' (every address) as is."""
    address = str(address or "").strip()
    return "[%s]" % address if ":" in address else address


def exporter_web_config(tls_cert_file="", tls_key_file="", users=None):
    """The exporter-toolkit web configuration (node_exporter --web.config.file, dcgm-exporter
    --web-config-file) as a dict; {} when neither TLS nor basic auth is asked for.

    users maps a user name to its bcrypt hash; a plain password, or any other hash, is refused.
    """
    tls_cert_file = str(tls_cert_file or "").strip()
    tls_key_file = str(tls_key_file or "").strip()
    if bool(tls_cert_file) != bool(tls_key_file):
        raise ValueError("exporter TLS needs both a certificate and a key (gpu_monitoring_web_tls_cert and "
                         "gpu_monitoring_web_tls_key). Nothing was changed.")
    users = users or {}
    if not isinstance(users, dict):
        raise ValueError("gpu_monitoring_web_basic_auth_users must map user names to bcrypt hashes. Nothing was changed.")
    config = {}
    if tls_cert_file:
        config["tls_server_config"] = {"cert_file": tls_cert_file, "key_file": tls_key_file, "min_version": "TLS12"}
    if users:
        bad = sorted(str(name) for name, hashed in users.items()
                     if not USER_RE.match(str(name)) or not BCRYPT_RE.match(str(hashed or "")))
        if bad:
            raise ValueError(
                "gpu_monitoring_web_basic_auth_users: %s must map a user name (no colon or space) to a bcrypt hash "
                "($2y$10$..., e.g. from `htpasswd -nBC 10 USER`), never a plain password. Nothing was changed."
                % ", ".join(bad))
        config["basic_auth_users"] = dict((str(k), str(v)) for k, v in sorted(users.items()))
    return config


def exporter_scrape_config(job_name, *, file_sd_files, web_config=None, username="", password_file="", ca_file="",
                           server_name=""):
    """A Prometheus configuration with one scrape job for the exporters (every argument after the job name is a
    keyword), matching their web configuration:
    scheme https and tls_config with TLS, basic_auth (password read from password_file on the Prometheus
    server) with basic-auth users. username may be empty when exactly one user is configured.
    """
    web_config = web_config or {}
    job = {"job_name": str(job_name)}
    if web_config.get("tls_server_config"):
        job["scheme"] = "https"
        tls = {}
        if ca_file:
            tls["ca_file"] = str(ca_file)
        if server_name:
            tls["server_name"] = str(server_name)
        job["tls_config"] = tls
    else:
        job["scheme"] = "http"
    users = web_config.get("basic_auth_users") or {}
    if users:
        username = str(username or "").strip()
        if not username:
            if len(users) != 1:
                raise ValueError(
                    "several exporter users are configured (%s): name the one Prometheus scrapes as in "
                    "gpu_monitoring_scrape_username. Nothing was changed." % ", ".join(sorted(users)))
            username = next(iter(users))
        if username not in users:
            raise ValueError("gpu_monitoring_scrape_username %r is not among the exporter users (%s). Nothing was "
                             "changed." % (username, ", ".join(sorted(users))))
        if not str(password_file or "").strip():
            raise ValueError("with exporter basic auth, gpu_monitoring_scrape_password_file must name the file on "
                             "the Prometheus server that holds the password. Nothing was changed.")
        job["basic_auth"] = {"username": username, "password_file": str(password_file)}
    files = [file_sd_files] if isinstance(file_sd_files, str) else list(file_sd_files or [])
    job["file_sd_configs"] = [{"files": [str(f) for f in files]}]
    return {"scrape_configs": [job]}


class FilterModule(object):
    """gpufleet Prometheus helpers."""

    def filters(self):
        return {
            "file_sd_targets": as_filter(file_sd_targets),
            "file_sd_merge": as_filter(file_sd_merge),
            "gpu_summary": as_filter(gpu_summary),
            "exporter_listen_address": as_filter(exporter_listen_address),
            "exporter_listen_host": as_filter(listen_host),
            "exporter_web_config": as_filter(exporter_web_config),
            "exporter_scrape_config": as_filter(exporter_scrape_config),
        }
