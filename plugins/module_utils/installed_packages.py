# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The installed packages of a node in ansible.builtin.package_facts' shape: pure functions.

``gpufleet.cluster.node_facts`` (``packages: true``) reads ``/var/lib/dpkg/status`` or runs ``rpm -qa`` with
``RPM_QUERYFORMAT`` and hands the text here, so preflight learns the OS, the devices and the packages in one module
call instead of two (package_facts alone was the slowest task of a run that changes nothing). The result is
``{name: [{name, version, arch, source, ...}]}`` as package_facts gives it, which is what
``gpufleet.cluster.packages_missing`` reads. ``tests/unit/test_installed_packages.py`` compares both parsers with
package_facts' own answer on the same captured systems. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections import Counter

# One line per package: name, epoch, version, release, architecture, tab-separated. rpm prints "(none)" for a tag a
# package lacks (no epoch; the gpg-pubkey entries an imported key adds have no architecture).
RPM_QUERYFORMAT = "%{NAME}\t%{EPOCH}\t%{VERSION}\t%{RELEASE}\t%{ARCH}\n"
RPM_NONE = "(none)"


def dpkg_stanzas(text):
    """dpkg status text -> one dict per stanza of its top-level fields (lower-case keys); continuation lines
    (Description, Conffiles: those starting with a space or a tab) are skipped."""
    for stanza in re.split(r"\n[ \t]*\n", text or ""):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _sep, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields.get("package"):
            yield fields


def _installed(fields):
    """Only a package whose Status ends in "installed" counts ("install ok installed", "hold ok installed"): a
    removed one that keeps its configuration ("deinstall ok config-files") or an unpacked, half-configured or
    half-installed one does not, so the role's install task still runs for it and the package manager finishes it."""
    status = fields.get("status", "").split()
    return len(status) == 3 and status[2] == "installed"


def native_dpkg_arch(stanzas):
    """dpkg's own architecture (what ``dpkg --print-architecture`` says) is that of the installed dpkg package;
    without one, the architecture most installed packages have (other than ``all``)."""
    for fields in stanzas:
        if fields["package"] == "dpkg" and fields.get("architecture") not in (None, "", "all"):
            return fields["architecture"]
    counts = Counter(f.get("architecture") for f in stanzas if f.get("architecture") not in (None, "", "all"))
    return counts.most_common(1)[0][0] if counts else None


def parse_dpkg_status(text, native_arch=None):
    """``/var/lib/dpkg/status`` -> {name: [{name, version, arch, source: 'apt'}]} of the installed packages.

    Names follow package_facts (python-apt): a package of the native architecture or ``all`` under its plain name,
    one of a foreign architecture (``dpkg --add-architecture``) as ``name:arch``, so ``libc6`` is never taken as
    present because ``libc6:i386`` is."""
    stanzas = [fields for fields in dpkg_stanzas(text) if _installed(fields)]
    native = native_arch or native_dpkg_arch(stanzas)
    packages = {}
    for fields in stanzas:
        arch = fields.get("architecture", "")
        name = fields["package"]
        if arch not in ("", "all", native):
            name = "%s:%s" % (name, arch)
        packages.setdefault(name, []).append(
            {"name": name, "version": fields.get("version", ""), "arch": arch, "source": "apt"})
    return packages


def _rpm_value(value):
    return None if value == RPM_NONE else value


def parse_rpm_qa(text):
    """``rpm -qa --queryformat RPM_QUERYFORMAT`` -> {name: [{name, version, release, epoch, arch, source: 'rpm'}]}.

    As package_facts gives it: ``version`` without the release, one entry per installed version of a name (kernels
    are installed side by side). Where rpm prints "(none)" the value is null (package_facts writes the string
    "None")."""
    packages = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) != 5 or not parts[0]:
            continue
        name, epoch, version, release, arch = parts
        packages.setdefault(name, []).append({
            "name": name, "version": version, "release": release, "epoch": _rpm_value(epoch),
            "arch": _rpm_value(arch), "source": "rpm"})
    return packages
