# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The MPI/UCX stack a node's users get: where its Open MPI and UCX read their configuration, and its environment.

Pure functions over what the stack's own tools print (``ompi_info --path sysconfdir``, ``ompi_info --version``,
``ucx_info -v``), shared by the interconnect role through the filters in plugins/filter/mpi_stack.py.

Where UCX reads ucx.conf (UCX 1.12+, openucx/ucx#7057; each file found overrides the one before):
``<sysconfdir>/ucx/ucx.conf`` (sysconfdir as configured: ``--sysconfdir``, else ``<prefix>/etc``), then a file
next to the library: ``<dir of libucs.so>/../etc/ucx.conf`` up to UCX 1.16, ``<dir of libucs.so>/../etc/ucx/ucx.conf``
from 1.17 (openucx/ucx#9828), then ``~/.ucx.conf``, ``$UCX_CONFIG_DIR``, ``./ucx.conf``. A relocated build
(HPC-X: configured with a build machine's prefix) has no usable configured directory, so its file goes next to
the library.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath
import re

STACKS = ("os", "doca", "hpcx")

# HPC-X's layout under $HPCX_HOME (hpcx-init.sh / hpcx_load put these on PATH and LD_LIBRARY_PATH).
HPCX_BIN_DIRS = ("ompi/bin", "ucx/bin", "ucc/bin", "hcoll/bin", "sharp/bin", "clusterkit/bin")
HPCX_LIB_DIRS = ("ompi/lib", "ucx/lib", "ucx/lib/ucx", "ucc/lib", "ucc/lib/ucc", "hcoll/lib", "sharp/lib",
                 "nccl_rdma_sharp_plugin/lib")


def _text(value, what):
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError("%s: expected the command's output as text, got %r" % (what, type(value).__name__))
    return value


def ompi_path(text, name="sysconfdir"):
    """The directory ``ompi_info --path <name>`` printed, from its plain (``Sysconfdir: /etc/openmpi``) or
    ``--parsable`` (``path:sysconfdir:/etc/openmpi``) form."""
    text = _text(text, "ompi_info --path %s" % name)
    for line in text.splitlines():
        line = line.strip()
        parsable = re.match(r"^path:%s:(.+)$" % re.escape(name), line, re.IGNORECASE)
        plain = re.match(r"^%s:\s*(.+)$" % re.escape(name), line, re.IGNORECASE)
        found = parsable or plain
        if found and found.group(1).strip().startswith("/"):
            return found.group(1).strip()
    raise ValueError("ompi_info --path %s printed no %s directory: %r" % (name, name, text.strip()[:200]))


def ompi_version(text):
    """'5.0.7' from ``ompi_info --version`` (``Open MPI v5.0.7``); ValueError when there is none."""
    text = _text(text, "ompi_info --version")
    found = re.search(r"Open MPI v?([0-9]+(?:\.[0-9]+)*\S*)", text)
    if not found:
        raise ValueError("ompi_info --version printed no Open MPI version: %r" % text.strip()[:200])
    return found.group(1)


def _configure_option(flags, option):
    found = None
    for flag in flags:
        if flag.startswith(option + "="):
            found = flag.split("=", 1)[1]
    return found


def ucx_build(text):
    """What ``ucx_info -v`` says about the UCX build: version, library path (UCX 1.14+ print it), the configure
    flags, and the configured sysconfdir with ``${prefix}`` expanded as autoconf does."""
    text = _text(text, "ucx_info -v")
    version = None
    library = None
    flags = []
    for line in text.splitlines():
        line = line.strip()
        match = (re.match(r"^#\s*Library version:\s*(\S+)", line) or re.match(r"^#\s*Version\s+(\S+)", line)
                 or re.match(r"^#\s*UC[TP] version=(\S+)", line))
        if match and version is None:
            version = match.group(1)
            continue
        match = re.match(r"^#\s*Library path:\s*(\S+)", line)
        if match:
            library = match.group(1)
            continue
        match = re.match(r"^#\s*configured with:\s*(.*)$", line, re.IGNORECASE)
        if match:
            flags = match.group(1).split()
    if version is None:
        raise ValueError("ucx_info -v printed no UCX version: %r" % text.strip()[:200])
    prefix = _configure_option(flags, "--prefix") or "/usr/local"
    sysconfdir = _configure_option(flags, "--sysconfdir") or "${prefix}/etc"
    sysconfdir = sysconfdir.replace("${prefix}", prefix).replace("$prefix", prefix)
    return {
        "version": version,
        "library_path": library,
        "configure_flags": flags,
        "prefix": prefix,
        "sysconfdir": sysconfdir,
        "config_dir": posixpath.join(sysconfdir, "ucx"),
    }


def _version_tuple(version):
    parts = []
    for part in str(version).split("."):
        digits = re.match(r"^([0-9]+)", part)
        if not digits:
            break
        parts.append(int(digits.group(1)))
    return tuple(parts)


def ucx_config_dir(text, configured_dir_usable=True, library_dir=None):
    """The directory whose ucx.conf this UCX build reads.

    ``configured_dir_usable``: the configured sysconfdir exists on the node (the distribution's /etc; not the
    build machine's prefix baked into a relocated HPC-X). When it is not, the library-relative file is used, from
    the library path ``ucx_info -v`` printed or ``library_dir`` (the stack's UCX lib directory)."""
    build = ucx_build(text)
    version = _version_tuple(build["version"])
    if version < (1, 11):
        raise ValueError("UCX %s reads no ucx.conf (configuration files came with UCX 1.11)" % build["version"])
    if configured_dir_usable:
        return build["config_dir"]
    if version < (1, 12):
        raise ValueError("UCX %s reads ucx.conf only from its configured directory %s, which is not on this "
                         "node" % (build["version"], build["config_dir"]))
    libdir = posixpath.dirname(build["library_path"]) if build["library_path"] else library_dir
    if not libdir or "$" in libdir:
        raise ValueError("UCX %s: its configured directory %s is not on this node and its library directory "
                         "is unknown" % (build["version"], build["config_dir"]))
    relative = "../etc/ucx" if version >= (1, 17) else "../etc"
    return posixpath.normpath(posixpath.join(libdir, relative))


def stack_layout(stack, hpcx_dir="/opt/hpcx", doca_mpi_dirs=None, openmpi_sysconfdir=""):
    """Where the chosen stack's tools are: ``bin_dirs`` and ``lib_dirs`` to put first, ``ompi_info`` and
    ``ucx_info`` (absolute paths; bare names for the os stack, found on the default PATH), ``mpi_home`` and
    ``opal_prefix`` (HPC-X is relocatable: Open MPI finds its files through OPAL_PREFIX).

    doca: ``doca_mpi_dirs`` are the ``/usr/mpi/gcc/openmpi-*`` directories found on the node; the newest is used."""
    if stack not in STACKS:
        raise ValueError("interconnect_stack must be one of %s, got %r" % (", ".join(STACKS), stack))
    if stack == "os":
        return {"stack": stack, "bin_dirs": [], "lib_dirs": [], "ompi_info": "ompi_info", "ucx_info": "ucx_info",
                "mpi_home": "", "opal_prefix": "", "ucx_lib_dir": ""}
    if stack == "hpcx":
        home = str(hpcx_dir).rstrip("/")
        if not home.startswith("/"):
            raise ValueError("interconnect_hpcx_dir must be an absolute path, got %r" % (hpcx_dir,))
        return {"stack": stack, "bin_dirs": [posixpath.join(home, d) for d in HPCX_BIN_DIRS],
                "lib_dirs": [posixpath.join(home, d) for d in HPCX_LIB_DIRS],
                "ompi_info": posixpath.join(home, "ompi/bin/ompi_info"),
                "ucx_info": posixpath.join(home, "ucx/bin/ucx_info"),
                "mpi_home": posixpath.join(home, "ompi"), "opal_prefix": posixpath.join(home, "ompi"),
                "ucx_lib_dir": posixpath.join(home, "ucx/lib")}
    dirs = [str(d).rstrip("/") for d in (doca_mpi_dirs or []) if str(d).strip()]
    if not dirs:
        raise ValueError("DOCA-OFED installed no Open MPI under /usr/mpi/gcc/openmpi-*: is its openmpi package "
                         "in interconnect_doca_packages?")
    home = sorted(dirs, key=lambda d: _version_tuple(posixpath.basename(d).split("-", 1)[-1]))[-1]
    # DOCA-OFED's UCX is installed in /usr (ucx_info on the default PATH); its Open MPI keeps its own prefix.
    return {"stack": stack, "bin_dirs": [posixpath.join(home, "bin")], "lib_dirs": [posixpath.join(home, "lib")],
            "ompi_info": posixpath.join(home, "bin/ompi_info"), "ucx_info": "ucx_info",
            "mpi_home": home, "opal_prefix": "", "ucx_lib_dir": ""}


def stack_env(layout, base_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", base_ld=""):
    """The environment the stack's commands run with: its bin directories before ``base_path`` (so the
    distribution's /usr/bin/mpirun, if installed, cannot shadow it), its libraries before ``base_ld``, and
    OPAL_PREFIX/MPI_HOME where the stack has them. The os stack needs nothing: an empty dict."""
    env = {}
    if layout["bin_dirs"]:
        env["PATH"] = ":".join(list(layout["bin_dirs"]) + [p for p in str(base_path).split(":") if p])
    if layout["lib_dirs"]:
        env["LD_LIBRARY_PATH"] = ":".join(list(layout["lib_dirs"]) + [p for p in str(base_ld).split(":") if p])
    if layout["mpi_home"]:
        env["MPI_HOME"] = layout["mpi_home"]
    if layout["opal_prefix"]:
        env["OPAL_PREFIX"] = layout["opal_prefix"]
    return env
