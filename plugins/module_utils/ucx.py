# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""UCX build facts from ``ucx_info -v`` / ``ucx_info -d`` and the UCX_TLS the node gets, pure Python.

``ucx_info -d`` prints one ``#      Transport: <name>`` line per transport and device UCX can open on this node
(older releases indent it less: ``#   Transport: cma``); a transport whose memory domain finds no device prints
``#   < no supported devices found >`` instead. The CUDA transports appear only where UCX was built with CUDA
(``--with-cuda`` in ``ucx_info -v``'s "Configured with" line), its CUDA module loads and a GPU is visible;
``gdr_copy`` also needs the GDRCopy library and its ``gdrdrv`` kernel module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

CUDA_TRANSPORTS = ("cuda_copy", "cuda_ipc")
GDR_COPY = "gdr_copy"
DEFAULT_TLS = "rc,ud,sm,self"

_TRANSPORT_RE = re.compile(r"^#\s+Transport:\s+(\S+)\s*$", re.MULTILINE)
_MD_RE = re.compile(r"^#\s+Memory domain:\s+(\S+)\s*$", re.MULTILINE)
# 1.11 and later print "# Library version: 1.16.0"; Debian 12's 1.13.1 build prints "# Version 1.13.1".
_VERSION_RE = re.compile(r"^#\s+(?:Library version:|Version)\s+([0-9][0-9A-Za-z.+~-]*)", re.MULTILINE)
_CONFIGURED_RE = re.compile(r"^#\s+Configured with:\s*(.*)$", re.MULTILINE)


def parse_version(text):
    """(version, configure arguments) from ``ucx_info -v``; either is None when the line is missing."""
    version = _VERSION_RE.search(text or "")
    configured = _CONFIGURED_RE.search(text or "")
    return (version.group(1) if version else None,
            configured.group(1).strip() if configured else None)


def _configured_with(configured, feature):
    """True/False when the configure line says --with-<feature>[=...] / --without-<feature>; None when silent."""
    if configured is None:
        return None
    args = configured.split()
    if any(a == "--without-" + feature or a == "--with-%s=no" % feature for a in args):
        return False
    if any(a == "--with-" + feature or a.startswith("--with-%s=" % feature) for a in args):
        return True
    return None


def parse_transports(text):
    """Transport names ``ucx_info -d`` lists, each once, in the order printed."""
    seen = []
    for name in _TRANSPORT_RE.findall(text or ""):
        if name not in seen:
            seen.append(name)
    return seen


def memory_domains(text):
    """Memory domain names ``ucx_info -d`` prints (cuda_cpy, cuda_ipc, gdr_copy, mlx5_0, ...)."""
    return _MD_RE.findall(text or "")


def _tls_items(tls):
    return [t.strip() for t in (tls or "").split(",") if t.strip()]


def _absent_reason(name, built_cuda, built_gdrcopy, domains):
    if name == GDR_COPY:
        if built_cuda is False or built_gdrcopy is False:
            return "this UCX build has no GDRCopy support (configured without --with-cuda/--with-gdrcopy)"
        if built_gdrcopy is None and GDR_COPY not in domains:
            return ("this UCX build has no GDRCopy support (no --with-gdrcopy in ucx_info -v, no gdr_copy "
                    "memory domain in ucx_info -d)")
        return ("UCX was built with GDRCopy but ucx_info -d lists no gdr_copy transport (libgdrapi or the "
                "gdrdrv kernel module missing, or no GPU visible)")
    if built_cuda is False or (built_cuda is None and "cuda_cpy" not in domains):
        return "this UCX build has no CUDA support (no --with-cuda in ucx_info -v, no cuda memory domain)"
    return ("UCX was built with CUDA but ucx_info -d lists no %s transport (no GPU visible, or the CUDA "
            "driver or UCX's CUDA module missing)" % name)


def decide(version_text, devices_text, base_tls=DEFAULT_TLS, operator_tls=None, found=True, error=None):
    """What UCX has and the UCX_TLS this node is given.

    ``base_tls`` is the role's interconnect_ucx_tls; the CUDA transports the build lists are appended to it.
    ``operator_tls`` (UCX_TLS set explicitly in interconnect_ucx_settings) is used as it stands. A base that
    is an exclusion list (``^ud``), ``all``, or already names a CUDA transport (or the ``cuda`` alias) is also
    left as it stands: UCX then already has, or was told not to have, the CUDA transports.
    """
    version, configured = parse_version(version_text)
    transports = parse_transports(devices_text)
    domains = memory_domains(devices_text)
    built_cuda = _configured_with(configured, "cuda")
    built_gdrcopy = _configured_with(configured, "gdrcopy")
    wanted = list(CUDA_TRANSPORTS) + [GDR_COPY]
    available = [t for t in wanted if t in transports]
    absent = {}
    if not found:
        for name in wanted:
            absent[name] = "ucx_info could not be run: %s" % (error or "not found")
    else:
        for name in wanted:
            if name not in transports:
                absent[name] = _absent_reason(name, built_cuda, built_gdrcopy, domains)

    base_items = _tls_items(base_tls)
    added = []
    if operator_tls:
        tls, source = operator_tls, "operator"
        reason = "UCX_TLS is set in interconnect_ucx_settings and written as it stands"
    elif base_tls.strip().startswith("^"):
        tls, source = base_tls, "base"
        reason = "interconnect_ucx_tls is an exclusion list (^...): UCX keeps every other transport, CUDA ones included"
    elif "all" in base_items:
        tls, source = base_tls, "base"
        reason = "interconnect_ucx_tls is all: UCX uses every transport it has"
    elif any(t in base_items for t in ("cuda",) + tuple(wanted)):
        tls, source = base_tls, "base"
        reason = "interconnect_ucx_tls already names CUDA transports; left as it stands"
    else:
        added = [t for t in available if t not in base_items]
        tls = ",".join(base_items + added)
        source = "computed"
        if added:
            reason = "added %s: listed by ucx_info -d" % ",".join(added)
        else:
            reasons = []
            for name in CUDA_TRANSPORTS:
                if reasons and reasons[-1][1] == absent[name]:
                    reasons[-1][0].append(name)
                else:
                    reasons.append(([name], absent[name]))
            reason = "no CUDA transport added: " + "; ".join(
                "%s: %s" % (", ".join(names), why) for names, why in reasons)
    return {
        "found": bool(found),
        "version": version,
        "configured_with": configured,
        "built_with_cuda": built_cuda,
        "built_with_gdrcopy": built_gdrcopy,
        "transports": transports,
        "memory_domains": domains,
        "base_tls": base_tls,
        "tls": tls,
        "tls_source": source,
        "cuda_added": added,
        "cuda_available": available,
        "cuda_absent": absent,
        "reason": reason,
    }
