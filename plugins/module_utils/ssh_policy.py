# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure helpers for the SSH roles: parse ``sshd -T`` and the server KEXINIT an ``ssh -vv`` client
prints, tell whether the running sshd serves the configuration on disk, and build
``/etc/ssh/ssh_known_hosts`` lines. No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

# sshd -T keywords that may appear more than once; their values are kept as a list.
MULTI_VALUED = ("hostkey", "listenaddress", "port", "acceptenv", "subsystem", "include")

# ssh -vv: label of each list in the peer server KEXINIT proposal -> sshd -T keyword it mirrors.
KEXINIT_LABELS = {
    "KEX algorithms": "kexalgorithms",
    "host key algorithms": "hostkeyalgorithms",
    "ciphers ctos": "ciphers",
    "MACs ctos": "macs",
}

# Pseudo-algorithms a server appends to its KEX list; they are not configured in sshd_config.
KEX_PSEUDO = ("ext-info-s", "ext-info-c", "kex-strict-s-v00@openssh.com", "kex-strict-c-v00@openssh.com")


def parse_sshd_effective(text):
    """Parse ``sshd -T`` (``keyword value`` lines, keywords lower case) into a dict.

    Keywords in MULTI_VALUED map to a list of values, every other keyword to its string value.
    """
    result = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        key = key.lower()
        value = value.strip()
        if key in MULTI_VALUED:
            result.setdefault(key, []).append(value)
        else:
            result[key] = value
    return result


def parse_kexinit_probe(text):
    """Read what a running sshd offers from the debug output of ``ssh -vv``.

    Returns ``{kexalgorithms, hostkeyalgorithms, ciphers, macs, auth_methods, banner}``: the
    algorithm lists of the *server's* KEXINIT proposal (pseudo-algorithms removed), the methods
    from the first "Authentications that can continue" line and the remote software version.
    Missing parts are empty; an empty ``kexalgorithms`` means the probe never reached the server.
    """
    result = {key: [] for key in KEXINIT_LABELS.values()}
    result["auth_methods"] = []
    result["banner"] = ""
    in_server = False
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("debug1: Remote protocol version"):
            result["banner"] = line.rpartition("remote software version ")[2]
        elif line.endswith("peer server KEXINIT proposal"):
            in_server = True
        elif line.endswith("peer client KEXINIT proposal") or line.startswith("debug1: kex: algorithm:"):
            in_server = False
        elif in_server and line.startswith("debug2: "):
            label, sep, values = line[len("debug2: "):].partition(": ")
            if not sep:
                label, values = label.rstrip(":"), ""
            key = KEXINIT_LABELS.get(label)
            if key and not result[key]:
                items = [item for item in values.split(",") if item]
                if key == "kexalgorithms":
                    items = [item for item in items if item not in KEX_PSEUDO]
                result[key] = items
        elif "Authentications that can continue:" in line and not result["auth_methods"]:
            methods = line.partition("Authentications that can continue:")[2].strip()
            result["auth_methods"] = [item for item in methods.split(",") if item]
    return result


def expected_auth_methods(effective):
    """Authentication methods an sshd with this ``sshd -T`` dict offers to an unknown user."""
    methods = []
    if effective.get("pubkeyauthentication", "yes") == "yes":
        methods.append("publickey")
    if effective.get("passwordauthentication", "yes") == "yes":
        methods.append("password")
    if effective.get("kbdinteractiveauthentication", "no") == "yes":
        methods.append("keyboard-interactive")
    if effective.get("gssapiauthentication", "no") == "yes":
        methods.extend(["gssapi-keyex", "gssapi-with-mic"])
    if effective.get("hostbasedauthentication", "no") == "yes":
        methods.append("hostbased")
    return methods


def runtime_drift(probe, effective):
    """Differences between what the running sshd offers (``probe``) and the config on disk.

    ``probe`` comes from parse_kexinit_probe, ``effective`` from parse_sshd_effective. Returns a list
    of readable strings, empty when the daemon serves the configuration on disk.
    """
    if not probe.get("kexalgorithms"):
        return ["the probe did not reach sshd (no server KEXINIT in the ssh -vv output)"]
    drift = []
    for key in KEXINIT_LABELS.values():
        want = [item for item in effective.get(key, "").split(",") if item]
        if key == "hostkeyalgorithms":
            # sshd only offers host key algorithms it holds a key for: compare as a subset.
            extra = sorted(set(probe[key]) - set(want))
            if extra:
                drift.append("%s: live sshd offers %s, not in %s" % (key, ",".join(extra), ",".join(want)))
            continue
        if probe[key] != want:
            drift.append("%s: live %s, configured %s" % (key, ",".join(probe[key]), ",".join(want)))
    want_auth = sorted(expected_auth_methods(effective))
    if probe.get("auth_methods") and sorted(probe["auth_methods"]) != want_auth:
        drift.append(
            "authentication: live %s, configured %s" % (",".join(probe["auth_methods"]), ",".join(want_auth))
        )
    return drift


def known_hosts_lines(nodes, existing_text=""):
    """Lines of an ``ssh_known_hosts`` file for the cluster.

    ``nodes``: one dict per node, ``{names: [name or address, ...], key: "ssh-ed25519 AAAA... [comment]"}``.
    A node whose ``key`` is empty was not reached by this run: its lines are kept from
    ``existing_text`` (matched by any of its names), so a ``--limit`` run never drops a node it did
    not see. Lines for names outside ``nodes`` are dropped. Returns sorted, de-duplicated lines.
    """
    lines = set()
    unseen = set()
    for node in nodes:
        names = [str(name).strip() for name in node.get("names") or [] if str(name).strip()]
        if not names:
            raise ValueError("a node has no name or address for ssh_known_hosts: %r" % (node,))
        key = " ".join(str(node.get("key") or "").split()[:2])
        if key:
            if len(key.split()) != 2:
                raise ValueError("host key of %s is not '<type> <base64>': %r" % (names[0], node.get("key")))
            lines.add("%s %s" % (",".join(_unique(names)), key))
        else:
            unseen.update(names)
    for raw in (existing_text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("|") or line.startswith("@"):
            continue
        fields = line.split()
        if len(fields) < 3:
            continue
        if set(fields[0].split(",")) & unseen:
            lines.add(" ".join(fields[:3]))
    return sorted(lines)


def addresses_in_networks(addresses, networks):
    """The addresses (strings) that fall inside any of the CIDR ``networks``, in input order."""
    nets = [ipaddress.ip_network(str(net), strict=False) for net in networks or [] if str(net).strip()]
    found = []
    for address in addresses or []:
        try:
            ip = ipaddress.ip_address(str(address).strip())
        except ValueError:
            continue
        if any(ip.version == net.version and ip in net for net in nets) and str(ip) not in found:
            found.append(str(ip))
    return found


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
