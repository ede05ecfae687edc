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
    assert ssh_session.ssh_session(500, sudo_chain, names.get) == {
        "client_address": "10.0.0.5", "client_port": 51234, "server_address": "10.0.0.11", "server_port": 22,
        "uid": 1001, "user": "admin"}


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
