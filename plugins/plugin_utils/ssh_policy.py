# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure helpers for the SSH roles: parse ``sshd -T`` and the server KEXINIT an ``ssh -vv`` client
prints, tell whether the running sshd serves the configuration on disk, and build
``/etc/ssh/ssh_known_hosts`` lines from what the inventory says (never from what a node claims alone), and tell
whether sshd or nftables settings would lock out the SSH session Ansible runs under (lockout_problems).
No Ansible import here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import ipaddress
import re
import struct

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.cluster import node_own_addresses

# sshd -T keywords that may appear more than once; their values are kept as a list.
MULTI_VALUED = ("hostkey", "listenaddress", "port", "acceptenv", "subsystem", "include", "allowgroups",
                "allowusers", "denygroups", "denyusers")

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
        key, _sep, value = line.partition(" ")
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


# Characters ssh reads as patterns or separators in a known_hosts host field: a name holding one could match,
# and so take over, other hosts.
PATTERN_CHARS = "*?![],"
_HOSTNAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?$")
# Names every host has; never a name of one node.
NEVER_NAMES = ("localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6", "ip6-localhost")
_ED25519_PREFIX = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32)


def known_hosts_name(value, host, source):
    """``value`` as it goes into a known_hosts host field: an IP address in canonical form, or a lower-case
    host name. Raises ValueError for anything else, pattern characters and whitespace above all."""
    text = str(value)
    if any(char in PATTERN_CHARS or char.isspace() for char in text) or not text:
        raise ValueError(
            "%s: %s gives %r as one of its names; known_hosts pattern characters (%s) and whitespace are "
            "refused, since such a name would match other hosts. Fix %s. Nothing was changed."
            % (host, source, text, " ".join(PATTERN_CHARS), source))
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text.lower()
    if not _HOSTNAME.match(name):
        raise ValueError(
            "%s: %s gives %r as one of its names, which is neither an IP address nor a host name (letters, digits, "
            "'.', '-', '_'). Fix %s. Nothing was changed." % (host, source, text, source))
    return name


def parse_host_key(text, host):
    """The one ``ssh-ed25519 <base64>`` key in ``text`` (a host's ``ssh_host_ed25519_key.pub``), comment dropped.

    Raises ValueError unless the text holds exactly one key line, of type ssh-ed25519, whose base64 decodes to a
    well-formed ed25519 public key blob (the type inside must match, the key must be 32 bytes).
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip() and not line.strip().startswith("#")]
    problem = None
    if len(lines) != 1:
        problem = "%d key lines instead of one" % len(lines)
    else:
        fields = lines[0].split()
        if len(fields) < 2 or fields[0] != "ssh-ed25519":
            problem = "not an ssh-ed25519 key"
        else:
            try:
                blob = base64.b64decode(fields[1].encode("ascii"), validate=True)
            except (binascii.Error, ValueError, UnicodeError):
                blob = b""
            if len(blob) != len(_ED25519_PREFIX) + 32 or not blob.startswith(_ED25519_PREFIX):
                problem = "the base64 part is not an ed25519 public key"
            elif base64.b64encode(blob).decode("ascii") != fields[1]:
                problem = "the base64 part is not in canonical form"
    if problem:
        raise ValueError(
            "%s: its host key is not a single valid 'ssh-ed25519 <base64>' key (%s). Check "
            "/etc/ssh/ssh_host_ed25519_key.pub on %s. Nothing was changed." % (host, problem, host))
    return "ssh-ed25519 " + lines[0].split()[1]


def node_names(host, host_vars, extra_names=(), trust_fact_names=False, resolve=None):
    """Names and addresses a node is known by in ssh_known_hosts, and the fact names left out.

    From the inventory: the inventory name, ansible_host, gpufleet_cluster_address and the node's own addresses
    (plugin_utils/cluster.node_own_addresses: inventory addresses, else those ``resolve``, the controller's resolver,
    gives for a node named by DNS; never its facts), then ``extra_names`` (cluster_ssh_extra_names). The hostname
    and FQDN the node reports about itself are used only where they equal one of those or ``trust_fact_names`` is
    set; the others come back in the second list so the caller can refuse one that names another node. Every value
    is checked with known_hosts_name(). Returns ``(names, unused_fact_names)``.
    """
    names = []
    listed = [(host, "the inventory name")]
    for key in ("ansible_host", "gpufleet_cluster_address"):
        if host_vars.get(key):
            listed.append((host_vars.get(key), key))
    listed += [(str(address), "its address (gpufleet_node_addresses or the controller's resolution of its name)")
               for address in node_own_addresses(host_vars, host, resolve)]
    listed += [(name, "cluster_ssh_extra_names") for name in extra_names or ()]
    for value, source in listed:
        name = known_hosts_name(str(value).strip() if source != "cluster_ssh_extra_names" else value, host, source)
        if name not in NEVER_NAMES and name not in names:
            names.append(name)
    facts = host_vars.get("ansible_facts") or {}
    unused = []
    for key in ("hostname", "fqdn"):
        value = facts.get(key)
        if value in (None, ""):
            continue
        name = known_hosts_name(value, host, "the %s it reports (ansible_facts.%s)" % (key, key))
        if name in NEVER_NAMES or name in names:
            continue
        if trust_fact_names:
            names.append(name)
        elif name not in unused:
            unused.append(name)
    return names, unused


_PORTED_NAME = re.compile(r"^\[([^\]]+)\]:([0-9]+)$")


def known_hosts_entry(name, port):
    """``name`` as ssh looks it up in known_hosts for ``port``: bare on 22, ``[name]:port`` on any other port."""
    return name if int(port) == 22 else "[%s]:%d" % (name, int(port))


def split_known_hosts_entry(entry):
    """``(name, port)`` of a known_hosts entry written by known_hosts_entry()."""
    found = _PORTED_NAME.match(entry)
    return (found.group(1), int(found.group(2))) if found else (entry, 22)


def node_ssh_port(host, host_vars, default_port):
    """The port ``host``'s sshd listens on: its ``gpufleet_ssh_port`` where the inventory sets one, else
    ``default_port``. Raises ValueError unless it is a port number."""
    value = host_vars.get("gpufleet_ssh_port")
    value = default_port if value in (None, "") else value
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536 or isinstance(value, bool):
        raise ValueError("%s: gpufleet_ssh_port %r is not a port number (1-65535). Nothing was changed." % (host, value))
    return port


def ssh_config_hosts(lines):
    """``[[port, [names]]]`` of known_hosts ``lines``, sorted by port: the bare names sshd is reached at on each
    port, for the ``Host``/``Port`` blocks of the cluster's ssh_config."""
    by_port = {}
    for line in lines:
        for entry in line.split()[0].split(","):
            name, port = split_known_hosts_entry(entry)
            by_port.setdefault(port, set()).add(name)
    return [[port, sorted(by_port[port])] for port in sorted(by_port)]


def cluster_known_hosts(hostvars, hosts, existing_text="", trust_fact_names=False, resolve=None, ssh_port=22):
    """Lines of the cluster's ``/etc/ssh/ssh_known_hosts``, every name bound to exactly one node's key.

    ``hostvars[host]`` holds the inventory values and facts, and for a node this run reached
    ``cluster_ssh_node_identity`` = ``{key: <its ssh_host_ed25519_key.pub>, extra_names: [...]}``. Names come from
    node_names() (``resolve``: the controller's resolver, for a node the inventory names by DNS only). A node without
    a key this run keeps the key its names have in ``existing_text`` (so a ``--limit`` run drops no node); lines of
    names outside the cluster are dropped.

    Raises ValueError, before anything is written, when a name holds pattern characters, a name or address is
    claimed by two nodes (a reported hostname naming another node included), a host key is not one valid
    ssh-ed25519 key, or the current file gives an unreached node two different keys.

    A node whose sshd listens on a port other than 22 (its ``gpufleet_ssh_port``, else ``ssh_port``) has its names
    written ``[name]:port``, as ssh looks them up there.
    """
    owner = {}
    plan = []
    unused_facts = {}
    for host in sorted(set(hosts)):
        host_vars = hostvars.get(host) or {}
        identity = host_vars.get("cluster_ssh_node_identity") or {}
        extra = identity.get("extra_names") if identity else host_vars.get("cluster_ssh_extra_names")
        names, unused_facts[host] = node_names(host, host_vars, extra or (), trust_fact_names, resolve)
        for name in names:
            if owner.get(name, host) != host:
                raise ValueError(
                    "%s is claimed by both %s and %s: a name or address in ssh_known_hosts must belong to one node "
                    "(check inventory names, ansible_host, gpufleet_cluster_address, gpufleet_node_addresses and "
                    "cluster_ssh_extra_names). Nothing was changed." % (name, owner[name], host))
            owner[name] = host
        plan.append((host, names, identity.get("key") or "", node_ssh_port(host, host_vars, ssh_port)))
    for host in sorted(unused_facts):
        for name in unused_facts[host]:
            if name in owner and owner[name] != host:
                raise ValueError(
                    "%s reports %s as its own name, but that is a name of %s: a node must not take over another's "
                    "name in ssh_known_hosts (a compromised or misconfigured node). Nothing was changed."
                    % (host, name, owner[name]))
    existing = []
    for raw in (existing_text or "").splitlines():
        fields = raw.strip().split()
        if len(fields) >= 3 and not fields[0].startswith(("#", "|", "@")):
            existing.append((set(split_known_hosts_entry(entry)[0] for entry in fields[0].lower().split(",")),
                             " ".join(fields[1:3])))
    lines = []
    for host, names, key, port in plan:
        if key:
            key = parse_host_key(key, host)
        else:
            found = sorted(set(line_key for line_names, line_key in existing if line_names & set(names)))
            if len(found) > 1:
                raise ValueError(
                    "%s was not reached by this run and the current ssh_known_hosts gives its names %d different "
                    "keys: run the play on every cluster node to read its key again. Nothing was changed."
                    % (host, len(found)))
            if not found:
                continue
            key = found[0]
        lines.append("%s %s" % (",".join(known_hosts_entry(name, port) for name in names), key))
    return sorted(lines)


# PermitRootLogin values under which root still logs in with a key and runs any command, as Ansible does
# (without-password is the old name of prohibit-password; forced-commands-only runs only a key's command=).
ROOT_KEY_LOGIN = ("yes", "prohibit-password", "without-password")


def _in_any(address, networks):
    return any(address in ipaddress.ip_network(str(network), strict=False) for network in networks or ())


def controller_address_outside(session, networks):
    """``[address]``: the controller's address as the node sees it (node_facts' ``ssh_session.client_address``) when
    none of ``networks`` (addresses or CIDRs) holds it; ``[]`` when one does, or when there is no session (docker
    exec, a local connection). What fail2ban's ignoreip and sshd's penalty exemptions add so the controller running
    Ansible is never held back, without changing when it runs from inside a network already listed."""
    if not session or not session.get("client_address"):
        return []
    address = ipaddress.ip_address(session["client_address"])
    return [] if _in_any(address, networks) else [str(address)]


def lockout_problems(session, *, permit_root_login=None, allow_groups=None, any_port=None, ssh_only=None,
                     ssh_ports=None):
    """Why the SSH session Ansible runs under (node_facts' ``ssh_session``: client_address, server_port, user, uid,
    groups) would no longer get in once sshd or the nftables policy has the settings given; [] when it would, or
    when there is no session (docker exec, a local connection: nothing sshd or nftables could lock out).

    sshd: ``permit_root_login`` (refused for root unless it still lets a key in) and ``allow_groups`` (the
    AllowGroups names the role writes; empty writes none, so everyone passes), checked against the account's groups.
    nftables: ``any_port`` (sources the policy accepts on every port: loopback, the cluster's trusted set) and
    ``ssh_only`` (the admin networks, accepted on ``ssh_ports`` only), checked against the controller's address
    and the port sshd accepted this session on. A check runs only when its settings are given (not None).
    """
    if not session:
        return []
    problems = []
    user = session.get("user") or "uid %s" % session.get("uid")
    if permit_root_login is not None and (session.get("uid") == 0 or session.get("user") == "root"):
        if str(permit_root_login).lower() not in ROOT_KEY_LOGIN:
            problems.append(
                "Ansible logs in to this node as root and ssh_hardening_permit_root_login %s would refuse root's next "
                "login: set ssh_hardening_permit_root_login to prohibit-password, or connect as an administrator "
                "account (ansible_user) that becomes root with sudo" % permit_root_login)
    wanted = [str(group) for group in allow_groups or ()]
    groups = sorted(session.get("groups") or ())
    if wanted and not set(wanted) & set(groups):
        problems.append(
            "Ansible logs in to this node as %s, whose groups (%s) share none with AllowGroups (%s), so sshd would "
            "refuse its next login: add one of its groups to ssh_hardening_allow_groups, or connect as a member of "
            "those groups" % (user, ", ".join(groups) or "none known", ", ".join(wanted)))
    if any_port is not None or ssh_only is not None:
        address = ipaddress.ip_address(session["client_address"])
        port = session.get("server_port")
        if not _in_any(address, any_port):
            if not _in_any(address, ssh_only):
                problems.append(
                    "the controller's address as this node sees it, %s, is neither in os_hardening_admin_networks "
                    "nor a trusted cluster address, so the nftables policy would close SSH to Ansible: add a network "
                    "that holds it to os_hardening_admin_networks (gpufleet_admin_networks)" % address)
            elif ssh_ports is not None and port not in [int(p) for p in ssh_ports]:
                problems.append(
                    "Ansible reaches sshd on port %s, which the nftables policy would not open to "
                    "os_hardening_admin_networks (os_hardening_nftables_ssh_ports: %s): add the port to "
                    "os_hardening_nftables_ssh_ports" % (port, ", ".join(str(p) for p in ssh_ports)))
    return problems
