# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The SSH session a module runs under, read from /proc (no Ansible import).

Ansible reaches a node over SSH as a login account, then usually becomes root with sudo, which clears the
environment. The login shell sshd started still carries SSH_CONNECTION ("client port server port"), and it runs as
the login account: walking up from the module's own process to the first ancestor with that variable gives the
controller's address as the node sees it, the port sshd accepted the connection on, and the account Ansible logs in
as. The roles use these to keep the operator from locking Ansible out (fail2ban's ignoreip, sshd's AllowGroups,
PermitRootLogin and Port, the nftables admin set). Nothing is found when the connection is not SSH (docker exec, a
local connection), and then there is nothing sshd could lock out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os

# More ancestors than a module ever has between itself and the login shell (python, sh, sudo, sh, sshd).
MAX_DEPTH = 32


def parse_ssh_connection(value):
    """{client_address, client_port, server_address, server_port} from SSH_CONNECTION's value; None when it is not
    four fields with two IP addresses and two ports."""
    fields = (value or "").split()
    if len(fields) != 4 or not fields[1].isdigit() or not fields[3].isdigit():
        return None
    try:
        client = ipaddress.ip_address(fields[0].split("%", 1)[0])
        server = ipaddress.ip_address(fields[2].split("%", 1)[0])
    except ValueError:
        return None
    # An IPv4 client on an IPv6 socket shows as ::ffff:a.b.c.d.
    client = getattr(client, "ipv4_mapped", None) or client
    server = getattr(server, "ipv4_mapped", None) or server
    return {"client_address": str(client), "client_port": int(fields[1]),
            "server_address": str(server), "server_port": int(fields[3])}


def _environ(proc, pid):
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as handle:
            entries = handle.read().split(b"\0")
    except (IOError, OSError):
        return {}
    found = {}
    for entry in entries:
        key, sep, value = entry.partition(b"=")
        if sep:
            found[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return found


def _parent_and_uid(proc, pid):
    """(parent pid, real uid) of pid from /proc/<pid>/status; (None, None) when it cannot be read."""
    parent = uid = None
    try:
        with open(os.path.join(proc, str(pid), "status")) as handle:
            for line in handle:
                if line.startswith("PPid:"):
                    parent = int(line.split()[1])
                elif line.startswith("Uid:"):
                    uid = int(line.split()[1])
    except (IOError, OSError, ValueError, IndexError):
        return None, None
    return parent, uid


def ssh_session(pid=None, proc="/proc", user_name=None, user_groups=None):
    """The SSH session above process pid (this one by default): the parsed SSH_CONNECTION of the nearest ancestor
    that has it, with ``user`` (the account that process runs as, by name where ``user_name`` knows it), ``uid`` and
    ``groups`` (the names of that account's primary and supplementary groups, as sshd's AllowGroups reads them);
    None when no ancestor has it."""
    pid = os.getpid() if pid is None else pid
    for _depth in range(MAX_DEPTH):
        if not pid or pid <= 1:
            return None
        parent, uid = _parent_and_uid(proc, pid)
        session = parse_ssh_connection(_environ(proc, pid).get("SSH_CONNECTION"))
        if session is not None:
            session["uid"] = uid
            session["user"] = (user_name or _user_name)(uid) if uid is not None else None
            session["groups"] = (user_groups or _user_groups)(uid) if uid is not None else []
            return session
        pid = parent
    return None


def _user_name(uid):
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return None


def _user_groups(uid):
    """Sorted names of the groups of the account with this uid (its primary group and those the group database
    lists it in); [] when the account or the lookup is unknown. Groups without a name are left out."""
    try:
        import grp
        import pwd
        account = pwd.getpwuid(uid)
        gids = os.getgrouplist(account.pw_name, account.pw_gid)
    except (KeyError, ImportError, AttributeError, OSError):
        return []
    found = set()
    for gid in gids:
        try:
            found.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return sorted(found)
