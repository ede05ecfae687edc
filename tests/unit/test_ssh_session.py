"""module_utils/ssh_session: the SSH session above a module, read from a /proc tree laid out as a node's is."""
import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import ssh_session


def process(proc, pid, parent, uid, environ=None):
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "status").write_text("Name:\tx\nPid:\t%d\nPPid:\t%d\nUid:\t%d\t0\t0\t0\n" % (pid, parent, uid))
    pairs = [b"%s=%s" % (k.encode(), v.encode()) for k, v in (environ or {}).items()]
    (folder / "environ").write_bytes(b"\0".join(pairs) + b"\0")


@pytest.fixture
def sudo_chain(tmp_path):
    """sshd (root) -> the admin's shell -> sudo (real uid the admin's) -> sh as root (environment cleared) ->
    python, as Ansible's pipelined become runs a module."""
    proc = tmp_path / "proc"
    connection = {"SSH_CONNECTION": "10.0.0.5 51234 10.0.0.11 22", "USER": "admin"}
    process(proc, 100, 1, 0)
    process(proc, 200, 100, 1001, connection)
    process(proc, 300, 200, 1001, connection)
    process(proc, 400, 300, 0, {"HOME": "/root"})
    process(proc, 500, 400, 0, {"HOME": "/root"})
    return str(proc)


def test_the_session_of_a_module_run_through_sudo(sudo_chain):
    names = {1001: "admin"}
    groups = {1001: ["adm", "admin"]}
    assert ssh_session.ssh_session(500, sudo_chain, names.get, groups.get) == {
        "client_address": "10.0.0.5", "client_port": 51234, "server_address": "10.0.0.11", "server_port": 22,
        "uid": 1001, "user": "admin", "groups": ["adm", "admin"]}


class Account(object):
    def __init__(self, name, gid):
        self.pw_name, self.pw_gid = name, gid


class Group(object):
    def __init__(self, name):
        self.gr_name = name


# getent passwd admin: admin:x:1001:1001::/home/admin:/bin/bash; getent group: admin:x:1001:, adm:x:4:admin,
# gpuadmin:x:1002:admin, and a gid (4242) the group database does not name.
PASSWD = {1001: Account("admin", 1001), 0: Account("root", 0)}
GROUPS = {0: Group("root"), 4: Group("adm"), 1001: Group("admin"), 1002: Group("gpuadmin")}
MEMBERSHIP = {"admin": [1001, 4, 1002, 4242], "root": [0]}


@pytest.fixture
def group_database(monkeypatch):
    import grp
    import pwd

    def getpwuid(uid):
        return PASSWD[uid]

    def getgrgid(gid):
        return GROUPS[gid]

    def getgrouplist(name, gid):
        assert gid == PASSWD[[uid for uid, entry in PASSWD.items() if entry.pw_name == name][0]].pw_gid
        return MEMBERSHIP[name]

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    monkeypatch.setattr(grp, "getgrgid", getgrgid)
    monkeypatch.setattr(ssh_session.os, "getgrouplist", getgrouplist)


def test_groups_of_the_login_account(group_database):
    assert ssh_session._user_groups(1001) == ["adm", "admin", "gpuadmin"]
    assert ssh_session._user_groups(0) == ["root"]


def test_groups_of_an_unknown_account(group_database):
    assert ssh_session._user_groups(4000) == []


def test_groups_read_from_this_machine():
    import grp
    import os
    names = ssh_session._user_groups(os.getuid())
    assert grp.getgrgid(os.getgid()).gr_name in names
    assert names == sorted(set(names))


def test_the_session_carries_the_groups_from_the_group_database(sudo_chain, group_database):
    session = ssh_session.ssh_session(500, sudo_chain)
    assert (session["user"], session["groups"]) == ("admin", ["adm", "admin", "gpuadmin"])


def test_no_session_without_ssh(tmp_path):
    proc = tmp_path / "proc"
    process(proc, 10, 1, 0, {"HOME": "/root"})
    process(proc, 20, 10, 0, {"HOME": "/root"})
    assert ssh_session.ssh_session(20, str(proc)) is None
    assert ssh_session.ssh_session(999, str(proc)) is None  # gone


@pytest.mark.parametrize("value, expected", [
    ("10.0.0.5 51234 10.0.0.11 2222", ("10.0.0.5", 2222)),
    ("::ffff:10.0.0.5 51234 ::ffff:10.0.0.11 22", ("10.0.0.5", 22)),
    ("fe80::1%eth0 4000 fe80::2%eth0 22", ("fe80::1", 22)),
    ("2001:db8::5 4000 2001:db8::11 22", ("2001:db8::5", 22)),
])
def test_ssh_connection_values(value, expected):
    parsed = ssh_session.parse_ssh_connection(value)
    assert (parsed["client_address"], parsed["server_port"]) == expected


@pytest.mark.parametrize("value", ["", "10.0.0.5 51234 10.0.0.11", "host 1 10.0.0.11 22", "10.0.0.5 x 10.0.0.11 22",
                                   "10.0.0.5 1 10.0.0.11 22 extra"])
def test_values_that_are_not_ssh_connection(value):
    assert ssh_session.parse_ssh_connection(value) is None
