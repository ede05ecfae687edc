# -*- coding: utf-8 -*-
"""plugin_utils/ssh_policy.lockout_problems (filter gpufleet.cluster.lockout_problems): would the sshd or nftables
settings a role is about to write refuse the SSH session Ansible runs under? The sessions have the shape
node_facts' ssh_session returns (module_utils/ssh_session), one of them read from a /proc tree the way the module
reads a node's. The roles' own tasks that call it (ssh_hardening's and os_hardening's checks, fail2ban's ignoreip) are
rendered with their variables as a play would (tests/unit/role_check.py)."""
import pytest
from ansible.errors import AnsibleFilterError
from role_check import RoleVariables, refusal

from ansible_collections.gpufleet.cluster.plugins.filter import ssh as ssh_filter
from ansible_collections.gpufleet.cluster.plugins.module_utils import ssh_session
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_policy import lockout_problems

# An inventory that connects as root (ansible_user: root), and the lab's way: an administrator who uses sudo.
ROOT_SESSION = {"client_address": "10.0.0.5", "client_port": 51234, "server_address": "10.0.0.11", "server_port": 22,
                "uid": 0, "user": "root", "groups": ["root"]}
ADMIN_SESSION = {"client_address": "192.0.2.40", "client_port": 40022, "server_address": "10.0.0.11",
                 "server_port": 22, "uid": 1001, "user": "gpuadmin", "groups": ["adm", "gpuadmin", "sudo"]}
# The role's AllowGroups: the admin and training users' groups (root is added while root login is allowed).
ALLOW = ["gpuadmin", "train"]
LOOPBACK = ["127.0.0.0/8", "::1"]


def filter_problems(session, **settings):
    return ssh_filter.FilterModule().filters()["lockout_problems"](session, **settings)


@pytest.mark.parametrize("session", [None, {}])
def test_no_session_no_check(session):
    # docker exec or a local connection: nothing sshd or nftables could lock out.
    assert lockout_problems(session, permit_root_login="no", allow_groups=ALLOW, any_port=[], ssh_only=[],
                            ssh_ports=[22]) == []


def test_root_with_permit_root_login_no_is_refused():
    problems = lockout_problems(ROOT_SESSION, permit_root_login="no", allow_groups=[])
    assert len(problems) == 1
    assert "as root" in problems[0] and "set ssh_hardening_permit_root_login to prohibit-password" in problems[0]
    assert not problems[0].endswith(".")


@pytest.mark.parametrize("value", ["no", "forced-commands-only", False, "bogus"])
def test_root_refused_by_every_value_that_keeps_a_key_out(value):
    assert len(lockout_problems(ROOT_SESSION, permit_root_login=value)) == 1


@pytest.mark.parametrize("value", ["yes", "prohibit-password", "without-password", "Prohibit-Password"])
def test_root_still_gets_in_with_a_key(value):
    assert lockout_problems(ROOT_SESSION, permit_root_login=value, allow_groups=ALLOW + ["root"]) == []


def test_root_login_setting_does_not_touch_other_accounts():
    assert lockout_problems(ADMIN_SESSION, permit_root_login="no", allow_groups=ALLOW) == []


def test_root_known_by_uid_alone():
    session = dict(ROOT_SESSION, user=None)
    assert len(lockout_problems(session, permit_root_login="no")) == 1


def test_account_outside_allow_groups_is_refused():
    session = dict(ADMIN_SESSION, user="ops", uid=1005, groups=["adm", "ops"])
    problems = lockout_problems(session, permit_root_login="no", allow_groups=ALLOW)
    assert problems == [
        "Ansible logs in to this node as ops, whose groups (adm, ops) share none with AllowGroups (gpuadmin, train), "
        "so sshd would refuse its next login: add one of its groups to ssh_hardening_allow_groups, or connect as a "
        "member of those groups"]


def test_supplementary_group_is_enough():
    session = dict(ADMIN_SESSION, user="ops", groups=["ops", "train"])
    assert lockout_problems(session, permit_root_login="no", allow_groups=ALLOW) == []


def test_empty_allow_groups_writes_none_and_lets_everyone_in():
    session = dict(ADMIN_SESSION, groups=[])
    assert lockout_problems(session, allow_groups=[]) == []
    assert lockout_problems(session, allow_groups=None) == []
    assert "none known" in lockout_problems(session, allow_groups=ALLOW)[0]


def test_root_with_both_problems_gets_both_messages():
    problems = lockout_problems(ROOT_SESSION, permit_root_login="no", allow_groups=ALLOW)
    assert len(problems) == 2
    assert "ssh_hardening_permit_root_login" in problems[0] and "ssh_hardening_allow_groups" in problems[1]


def test_controller_in_the_admin_networks_passes_nftables():
    assert lockout_problems(ADMIN_SESSION, any_port=LOOPBACK + ["10.0.0.11", "10.0.0.12"],
                            ssh_only=["192.0.2.0/24"], ssh_ports=[22]) == []


def test_controller_that_is_a_cluster_node_passes_on_any_port():
    session = dict(ADMIN_SESSION, client_address="10.0.0.12", server_port=2222)
    assert lockout_problems(session, any_port=LOOPBACK + ["10.0.0.11", "10.0.0.12"], ssh_only=["192.0.2.0/24"],
                            ssh_ports=[22]) == []


def test_controller_outside_every_accepted_source_is_refused():
    session = dict(ADMIN_SESSION, client_address="203.0.113.7")
    problems = lockout_problems(session, any_port=LOOPBACK + ["10.0.0.11"], ssh_only=["192.0.2.0/24", "2001:db8::/64"],
                                ssh_ports=[22])
    assert len(problems) == 1
    assert "203.0.113.7" in problems[0] and "os_hardening_admin_networks" in problems[0]


def test_controller_on_a_port_the_policy_does_not_open():
    session = dict(ADMIN_SESSION, server_port=2222)
    problems = lockout_problems(session, any_port=LOOPBACK, ssh_only=["192.0.2.0/24"], ssh_ports=[22])
    assert len(problems) == 1
    assert "port 2222" in problems[0] and "os_hardening_nftables_ssh_ports" in problems[0]


def test_ipv6_and_loopback_controllers():
    v6 = dict(ADMIN_SESSION, client_address="2001:db8::40")
    assert lockout_problems(v6, any_port=LOOPBACK, ssh_only=["2001:db8::/64"], ssh_ports=[22]) == []
    assert len(lockout_problems(v6, any_port=LOOPBACK, ssh_only=["192.0.2.0/24"], ssh_ports=[22])) == 1
    local = dict(ADMIN_SESSION, client_address="127.0.0.1", server_port=2222)
    assert lockout_problems(local, any_port=LOOPBACK, ssh_only=[], ssh_ports=[22]) == []


def test_sshd_checks_leave_nftables_alone_and_the_other_way_round():
    outside = dict(ROOT_SESSION, client_address="203.0.113.7")
    assert lockout_problems(outside, permit_root_login="prohibit-password") == []
    assert len(lockout_problems(outside, any_port=LOOPBACK, ssh_only=["192.0.2.0/24"])) == 1


def test_a_session_read_from_proc_through_the_filter(tmp_path):
    proc = tmp_path / "proc"
    chain = [(100, 1, 0, {}), (200, 100, 0, {"SSH_CONNECTION": "::ffff:10.0.0.5 51234 ::ffff:10.0.0.11 22"}),
             (300, 200, 0, {"HOME": "/root"})]
    for pid, parent, uid, environ in chain:
        folder = proc / str(pid)
        folder.mkdir(parents=True)
        (folder / "status").write_text("Name:\tx\nPid:\t%d\nPPid:\t%d\nUid:\t%d\t0\t0\t0\n" % (pid, parent, uid))
        (folder / "environ").write_bytes(b"".join(b"%s=%s\0" % (k.encode(), v.encode()) for k, v in environ.items()))
    session = ssh_session.ssh_session(300, str(proc), {0: "root"}.get, {0: ["root"]}.get)
    assert "ssh_hardening_permit_root_login" in filter_problems(session, permit_root_login="no")[0]
    assert filter_problems(session, any_port=LOOPBACK, ssh_only=["10.0.0.0/24"], ssh_ports=[22]) == []


def test_a_network_the_filter_cannot_read_fails_the_task():
    with pytest.raises(AnsibleFilterError):
        filter_problems(ADMIN_SESSION, any_port=["not-a-network"], ssh_only=[])


# The roles' own tasks, rendered with their variables as a play would (tests/unit/role_check.py): node1 and node2
# at 10.0.0.11 and 10.0.0.12.
SSH_CHECK = ("ssh_hardening", "main.yml", "Refuse sshd settings that would lock Ansible out")
NFT_CHECK = ("os_hardening", "main.yml", "Refuse an nftables policy that would close SSH to Ansible")


def test_ssh_hardening_refuses_root_with_its_default_permit_root_login():
    message = refusal(*SSH_CHECK, preflight_ssh_session=ROOT_SESSION)
    assert message.startswith("node1: Ansible logs in to this node as root")
    assert "ssh_hardening_permit_root_login" in message and message.endswith("Nothing was changed.")


def test_ssh_hardening_lets_the_admin_in_and_root_by_opt_in():
    assert refusal(*SSH_CHECK, preflight_ssh_session=dict(ADMIN_SESSION, user="gpufleet-admin",
                                                          groups=["gpufleet-admin"])) == ""
    # root is added to AllowGroups while root login is allowed (vars/main.yml).
    assert refusal(*SSH_CHECK, preflight_ssh_session=ROOT_SESSION,
                   ssh_hardening_permit_root_login="prohibit-password") == ""
    assert refusal(*SSH_CHECK, preflight_ssh_session=None) == ""


def test_ssh_hardening_refuses_an_account_outside_its_allow_groups():
    message = refusal(*SSH_CHECK, preflight_ssh_session=ADMIN_SESSION)
    assert "as gpuadmin, whose groups (adm, gpuadmin, sudo) share none with AllowGroups (gpufleet-admin, aiuser)" \
        in message
    assert refusal(*SSH_CHECK, preflight_ssh_session=ADMIN_SESSION, ssh_hardening_allow_groups=[]) == ""


def test_os_hardening_refuses_a_policy_that_closes_ssh_to_the_controller():
    message = refusal(*NFT_CHECK, preflight_ssh_session=dict(ADMIN_SESSION, client_address="203.0.113.7"),
                      os_hardening_nftables=True, gpufleet_admin_networks=["192.0.2.0/24"])
    assert message.startswith("node1: the controller's address as this node sees it, 203.0.113.7")
    assert "os_hardening_admin_networks" in message and message.endswith("Nothing was changed.")


def test_os_hardening_lets_in_the_admin_networks_and_the_cluster_nodes():
    assert refusal(*NFT_CHECK, preflight_ssh_session=ADMIN_SESSION, os_hardening_nftables=True,
                   gpufleet_admin_networks=["192.0.2.0/24"]) == ""
    assert refusal(*NFT_CHECK, preflight_ssh_session=dict(ADMIN_SESSION, client_address="10.0.0.12"),
                   os_hardening_nftables=True, gpufleet_admin_networks=["192.0.2.0/24"]) == ""
    assert "port 2222" in refusal(*NFT_CHECK, preflight_ssh_session=dict(ADMIN_SESSION, server_port=2222),
                                  os_hardening_nftables=True, gpufleet_admin_networks=["192.0.2.0/24"])


def fail2ban_ignoreip(**settings):
    """The role's ignoreip (vars/main.yml, read by the jail template) with these settings."""
    return RoleVariables("fail2ban", settings).get("__fail2ban_ignoreip")


def test_fail2ban_never_bans_the_controller_nor_the_admin_networks():
    # The controller inside an admin network: the network holds it, and the jail does not change with its address.
    assert fail2ban_ignoreip(preflight_ssh_session=ADMIN_SESSION, gpufleet_admin_networks=["192.0.2.0/24"]) == [
        "127.0.0.1/8", "::1", "10.0.0.11", "10.0.0.12", "192.0.2.0/24"]
    assert fail2ban_ignoreip(preflight_ssh_session=dict(ADMIN_SESSION, client_address="192.0.2.41"),
                             gpufleet_admin_networks=["192.0.2.0/24"]) == [
        "127.0.0.1/8", "::1", "10.0.0.11", "10.0.0.12", "192.0.2.0/24"]
    # Outside every network given: its own address is added.
    assert fail2ban_ignoreip(preflight_ssh_session=ADMIN_SESSION) == [
        "127.0.0.1/8", "::1", "10.0.0.11", "10.0.0.12", "192.0.2.40"]
    # A cluster node running Ansible: its address is there already.
    assert fail2ban_ignoreip(preflight_ssh_session=dict(ADMIN_SESSION, client_address="10.0.0.12")) == [
        "127.0.0.1/8", "::1", "10.0.0.11", "10.0.0.12"]
    # docker exec or a local connection: no controller address to add.
    assert fail2ban_ignoreip(preflight_ssh_session=None) == ["127.0.0.1/8", "::1", "10.0.0.11", "10.0.0.12"]


def test_the_controller_address_is_added_only_where_no_network_holds_it():
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_policy import controller_address_outside
    session = {"client_address": "198.51.100.7", "server_port": 22, "user": "gpufleet-admin", "uid": 1001}
    assert controller_address_outside(session, ["192.0.2.0/24", "10.0.0.11"]) == ["198.51.100.7"]
    assert controller_address_outside(session, ["198.51.100.0/24"]) == []
    assert controller_address_outside(dict(session, client_address="2001:db8::7"), ["2001:db8::/32"]) == []
    assert controller_address_outside(None, ["192.0.2.0/24"]) == []
    assert controller_address_outside({}, []) == []
