# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What the roles accept from the inventory before any value reaches a file, a command or a trust list.

Pure functions, no Ansible import. The roles call them through the filters of plugins/filter/input_policy.py from
their first check task, so a bad value is refused, with a message that says what to write instead, before any change.

- network_problem(): the one check of every network that ends in a trust list (fail2ban's ignoreip, sshd's
  exemptions and Match Address, the nftables accept sets, the cluster key's from=) or in an nftables rule: CIDR form,
  no host bits, and no prefix wider than MIN_PREFIX unless the opt-in names that exact network.
- value_problems(): one pattern per kind of value (user names, paths, durations, sizes, ...) written raw into a file.
- root_group_problems() and training_user_groups(): root-equivalent groups of the training user only by opt-in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

# The widest network trusted without an opt-in naming it: /16 for IPv4 (65 536 addresses), /48 for IPv6 (a site).
MIN_PREFIX = {4: 16, 6: 48}

# Groups whose members are root on the node or can become root without a password: sudo rights (sudo, wheel,
# admin), the container and VM engines' sockets (docker, lxd, incus-admin, libvirt), raw disks and kernel memory
# (disk, kmem), the password hashes (shadow), group-writable directories root runs code from on Debian (staff:
# /usr/local; src: /usr/src, where DKMS builds the driver modules as root), and root's own group.
ROOT_EQUIVALENT_GROUPS = ("root", "sudo", "wheel", "admin", "docker", "lxd", "incus-admin", "libvirt", "disk",
                          "kmem", "shadow", "staff", "src")

_NAME = r"[a-z_][a-z0-9_-]{0,31}"
_PATH_PART = r"[A-Za-z0-9_.@+-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    r"^(?:(?:%s(?:\.%s)*|localhost)(?::[0-9]{1,5})?/)?%s(?:/%s)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[0-9a-f]{64})?$" % (_LABEL, _LABEL, _IMAGE_COMPONENT, _IMAGE_COMPONENT))
_FAIL2BAN_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "mo": 2592000, "y": 31536000}
_FAIL2BAN_TIME = re.compile(r"^(?:[0-9]+(?:mo|[smhdwy]))+$|^[0-9]+$")
_FAIL2BAN_PART = re.compile(r"([0-9]+)(mo|[smhdwy])?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _absolute_path(value):
    if value == "/":
        return True
    if not re.match(r"^(?:/%s)+/?$" % _PATH_PART, value):
        return False
    return not any(part in (".", "..") for part in value.split("/"))


def _fail2ban_time(value):
    if not _FAIL2BAN_TIME.match(value):
        return False
    seconds = sum(int(number) * _FAIL2BAN_UNITS[unit or "s"] for number, unit in _FAIL2BAN_PART.findall(value))
    return seconds > 0


def _settings(value):
    """A dict of NAME: value for a KEY=VALUE or KEY = VALUE file: plain names, scalar values on one line."""
    if not isinstance(value, dict):
        return False
    for key, item in value.items():
        if not isinstance(key, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_.]*$", key):
            return False
        if isinstance(item, (dict, list, tuple)) or (item is not None and _CONTROL.search(str(item))):
            return False
    return True


def _pattern(regex):
    compiled = re.compile(regex)
    return lambda value: bool(compiled.match(value))


# kind: (check of one string value, what to write instead). Every check refuses control characters as well.
KINDS = {
    "user_name": (_pattern(r"^%s$" % _NAME),
                  "a plain user name: lower-case letters, digits, _ and -, starting with a letter or _, at most 32 "
                  "(no ALL, %group, #uid, spaces or newlines)"),
    "group_name": (_pattern(r"^%s$" % _NAME),
                   "a plain group name: lower-case letters, digits, _ and -, starting with a letter or _, at most 32"),
    "absolute_path": (_absolute_path,
                      "an absolute path of letters, digits and . _ - + @ only (no spaces, quotes, colons, commas or "
                      ".. parts), such as /etc/gpufleet/fabric.env"),
    "file_name": (_pattern(r"^[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*$"),
                  "a file name of letters, digits and . _ - + @, without / and not starting with a dot"),
    "path_pattern": (_pattern(r"^/[^\s\"'`\\]*$"),
                     "an absolute path or path pattern without spaces, quotes or backslashes, such as /var/lib/docker"),
    "command_name": (_pattern(r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*$"),
                     "a command name in /usr/bin such as gcc (no / and not starting with a dot)"),
    "module_name": (_pattern(r"^[A-Za-z0-9_-]+$"), "a kernel module name such as cramfs (letters, digits, _ and -)"),
    "package_name": (_pattern(r"^[A-Za-z0-9][A-Za-z0-9.+_:~=-]*$"),
                     "a package name, optionally with =version (letters, digits and . + _ - : ~ =, no spaces)"),
    "package_pattern": (_pattern(r"^[^\s\"'`\\;{}]+$"),
                        "a package name or pattern without spaces, quotes, backslashes, ; or braces, such as nvidia-"),
    "version": (_pattern(r"^[A-Za-z0-9][A-Za-z0-9.+~_:-]*$"), "a version such as 1.17.8 (no spaces)"),
    "url": (_pattern(r"^(?:https?://|file:/)[^\s\"'`<>\\{}|^]+$"),
            "an https://, http:// or file:/ URL without spaces, quotes, braces or backslashes"),
    "host_name": (_pattern(r"^%s(?:\.%s)*$" % (_LABEL, _LABEL)), "a DNS name such as registry.example.internal"),
    "image_reference": (lambda value: bool(_IMAGE_REFERENCE.match(value)),
                        "an image reference such as registry.example/ml/train:v2 or registry.example/ml/train@sha256:"
                        "<64 hex digits>"),
    "ssh_algorithm": (_pattern(r"^[a-z0-9][a-z0-9.@+-]*$"),
                      "an OpenSSH algorithm name such as curve25519-sha256 (lower-case letters, digits and . @ + -)"),
    "fail2ban_time": (_fail2ban_time,
                      "a fail2ban duration above zero such as 600, 10m, 1h, 1d or 1w (units s, m, h, d, w, mo, y; "
                      "-1, a ban for ever, and 0 are refused)"),
    "duration": (_pattern(r"^(?:[0-9]+(?:ms|s|m|h|d|w|y))+$"), "a duration such as 30s, 10m, 15d or 1h30m"),
    "tmpfs_size": (_pattern(r"^(?:[1-9][0-9]*[kKmMgGtT]?|(?:[1-9][0-9]?|100)%)$"),
                   "a tmpfs size alone: a number with an optional k, m, g or t suffix, or 1% to 100% of memory, "
                   "such as 64g or 50% (no other mount options)"),
    "byte_size": (_pattern(r"^[1-9][0-9]*[bkmgBKMG]?$"), "a size such as 8G or 100m"),
    "umask": (_pattern(r"^0?[0-7]{3}$"), "an octal umask such as 027"),
    "options": (_pattern(r"^[A-Za-z0-9 _./=,:+-]*$"),
                "command-line options of letters, digits, spaces and _ . / = , : + - only (no quotes, $, `, ;, | or "
                "newlines), such as -n"),
    "argument": (_pattern(r"^[^\s\"\\]+$"),
                 "one command-line argument without spaces, double quotes or backslashes, such as "
                 "--collector.systemd"),
    "interface_list": (_pattern(r"^[\^=]?[A-Za-z0-9_.:@/-]+(?:,[A-Za-z0-9_.:@/-]+)*$"),
                       "interface names or prefixes separated by commas, optionally after ^ (exclude) or = (exact), "
                       "such as lo,docker0 or ^lo,docker"),
    "ucx_transports": (_pattern(r"^\^?[a-z0-9_]+(?:,[a-z0-9_]+)*$"),
                       "UCX transports separated by commas, such as rc,ud,sm,self"),
    "one_line": (lambda value: True, "a single line (no newline, carriage return or other control character)"),
    "settings": (_settings,
                 "a dict of NAME: value, names of letters, digits, _ and . and values that are single-line "
                 "strings, numbers or booleans"),
}


def _values(value):
    """The values one setting holds: a list's items, else the value itself."""
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def value_problem(value, kind):
    """'' when ``value`` is a valid ``kind`` (see KINDS), else what to write instead."""
    if kind not in KINDS:
        raise ValueError("unknown kind of value %r (known: %s)" % (kind, ", ".join(sorted(KINDS))))
    check, what = KINDS[kind]
    if kind == "settings":
        return "" if check(value) else "write " + what
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, tuple)):
        return "write " + what
    text = str(value)
    if _CONTROL.search(text) or not check(text):
        return "write " + what
    return ""


def value_problems(settings, kind, optional=False):
    """Messages for every value of ``settings`` (``{setting name: value or list of values}``) that is not a ``kind``.

    ``optional``: an empty string (or None) stands for "not set" and passes. Each message names the setting and the
    value as Python writes it (so a newline shows as \\n) and says what to write instead.
    """
    problems = []
    for name in sorted(settings or {}):
        for value in _values(settings[name]):
            if optional and value in ("", None):
                continue
            problem = value_problem(value, kind)
            if problem:
                problems.append("%s: %r is refused; %s" % (name, value, problem))
    return problems


def _interface(value):
    if value is None or isinstance(value, (bool, dict, list, tuple)):
        raise ValueError("%r is not a network in CIDR form" % (value,))
    text = str(value)
    if not text or text != text.strip() or _CONTROL.search(text):
        raise ValueError("%r is not a network in CIDR form" % (value,))
    return ipaddress.ip_interface(text)


def network_problem(value, wide_networks=(), trust=True, wide_setting="gpufleet_wide_networks"):
    """'' when ``value`` may be used as a network, else what is wrong and what to write instead.

    A network is a CIDR in canonical form (10.20.0.0/24, fd00:20::/64) or a single address (10.20.0.5). It is
    refused when it has host bits set (10.1.2.3/0 would silently become 0.0.0.0/0) and, where it ends in a trust list
    (``trust``), when its prefix is wider than MIN_PREFIX (/16 for IPv4, /48 for IPv6) and ``wide_networks`` does not
    name that exact network; ``wide_setting`` is the opt-in setting the message points to.
    """
    try:
        interface = _interface(value)
    except ValueError:
        return ("%r is not a CIDR network: write one such as 10.20.0.0/24 or fd00:20::/64, or a single "
                "address" % (value,))
    network = interface.network
    if interface.ip != network.network_address:
        return ("%r has host bits set: write %s for the whole network (%d addresses) or %s for that address alone"
                % (value, network, network.num_addresses, interface.ip))
    if str(value) not in (str(network), str(interface.ip)):
        return "%r is not in canonical form: write %s" % (value, network)
    if trust and network.prefixlen < MIN_PREFIX[network.version]:
        wide = set()
        for item in wide_networks or ():
            try:
                wide.add(_interface(item).network)
            except ValueError:
                continue
        if network not in wide:
            return ("%s is wider than /%d (%d addresses): every host in it would be trusted like a cluster node; "
                    "list narrower networks, or name %s in %s to trust it as a whole"
                    % (network, MIN_PREFIX[network.version], network.num_addresses, network, wide_setting))
    return ""


def checked_network(value, wide_networks=(), trust=True, wide_setting="gpufleet_wide_networks"):
    """``value`` as an ipaddress network, or ValueError with network_problem()'s message."""
    problem = network_problem(value, wide_networks, trust, wide_setting)
    if problem:
        raise ValueError(problem)
    return _interface(value).network


def network_problems(settings, wide_networks=(), wide_setting="gpufleet_wide_networks", trust=True, optional=False):
    """network_problem() for every network of ``settings`` (``{setting name: network or list of networks}``), each
    message starting with the setting's name; the networks of ``wide_networks`` must be networks themselves."""
    problems = []
    for name in sorted(settings or {}):
        for value in _values(settings[name]):
            if optional and value in ("", None):
                continue
            problem = network_problem(value, wide_networks, trust, wide_setting)
            if problem:
                problems.append("%s: %s" % (name, problem))
    for value in _values(wide_networks or []):
        problem = network_problem(value, trust=False)
        if problem:
            problems.append("%s: %s" % (wide_setting, problem))
    return problems


def root_group_problems(groups, root_groups=()):
    """Messages for root-equivalent groups the training user would get without the opt-in that names them.

    ``groups`` is cluster_ssh_groups (ordinary groups only), ``root_groups`` cluster_ssh_root_groups (the
    root-equivalent groups named on purpose, docker among them).
    """
    problems = []
    for group in _values(groups or []):
        if group in ROOT_EQUIVALENT_GROUPS and group not in (root_groups or ()):
            problems.append("cluster_ssh_groups: %s is root-equivalent%s; remove it, or name it in "
                            "cluster_ssh_root_groups to give the training user that group on purpose"
                            % (group, " (docker run -v /:/host)" if group == "docker" else ""))
    for group in _values(root_groups or []):
        if group not in ROOT_EQUIVALENT_GROUPS:
            problems.append("cluster_ssh_root_groups: %r is not one of the root-equivalent groups (%s); put an "
                            "ordinary group in cluster_ssh_groups" % (group, ", ".join(ROOT_EQUIVALENT_GROUPS)))
    return problems


def training_user_groups(current, groups=(), root_groups=()):
    """The supplementary groups the training user ends up in.

    ``current`` (its groups now, primary group left out) is kept but for the root-equivalent groups no opt-in names,
    which are removed; then come ``groups`` and ``root_groups``. Each once, in that order.
    """
    allowed = set(root_groups or ())
    wanted = []
    for group in list(current or []) + list(groups or []) + list(root_groups or []):
        if group in ROOT_EQUIVALENT_GROUPS and group not in allowed:
            continue
        if group not in wanted:
            wanted.append(group)
    return wanted
