"""sshd's effective configuration (ssh_hardening) and fail2ban's sshd jail (fail2ban)."""
import ipaddress
import re
import warnings

import pytest

# An address of TEST-NET-1 (RFC 5737): never a cluster node, so sshd treats it as any outside source.
OUTSIDE = "192.0.2.1"


def sshd_effective(node, user=None, addr=None):
    """`sshd -T` as a {keyword: value} dict; with USER and ADDR, the Match blocks for that connection applied."""
    command = "/usr/sbin/sshd -T"
    if user:
        command += " -C user=%s,host=%s,addr=%s" % (user, addr, addr)
    out = node.check(command)
    result = {}
    for line in out.splitlines():
        key, _sep, value = line.partition(" ")
        result.setdefault(key.lower(), []).append(value)
    return {key: values[0] if len(values) == 1 else values for key, values in result.items()}


@pytest.fixture(scope="module")
def sshd(node):
    return sshd_effective(node)


def test_sshd_keys_only_and_no_root(node, expect, sshd):
    ssh = expect["ssh"]
    assert sshd["permitrootlogin"] == ssh["permit_root_login"], sshd["permitrootlogin"]
    for keyword, value in (("passwordauthentication", "no"), ("kbdinteractiveauthentication", "no"),
                           ("permitemptypasswords", "no"), ("pubkeyauthentication", "yes"),
                           ("authenticationmethods", "publickey"), ("permituserenvironment", "no"),
                           ("x11forwarding", "no"), ("allowagentforwarding", "no"), ("permittunnel", "no")):
        assert sshd.get(keyword) == value, "%s: sshd %s is %s, want %s" % (node.name, keyword, sshd.get(keyword), value)
    assert sshd["maxauthtries"] == str(ssh["max_auth_tries"])
    assert sshd["logingracetime"] == str(ssh["login_grace_time"])
    assert sshd["clientaliveinterval"] == str(ssh["client_alive_interval"])
    assert sshd["clientalivecountmax"] == str(ssh["client_alive_count_max"])
    assert sshd["maxstartups"] == ssh["max_startups"]
    if ssh["allow_tcp_forwarding"] == "no":
        assert sshd["allowtcpforwarding"] == "no", sshd["allowtcpforwarding"]


def test_sshd_allows_only_the_inventory_groups(node, expect, sshd):
    groups = sshd.get("allowgroups", [])
    groups = sorted(" ".join(groups if isinstance(groups, list) else [groups]).split())
    assert groups == sorted(expect["ssh"]["allow_groups"]), "%s: AllowGroups %s" % (node.name, groups)


def test_sshd_algorithms(node, expect, sshd):
    ssh = expect["ssh"]
    assert sshd["ciphers"].split(",") == ssh["ciphers"], sshd["ciphers"]
    assert sshd["macs"].split(",") == ssh["macs"], sshd["macs"]
    assert sshd["pubkeyacceptedalgorithms"].split(",") == ssh["pubkey_accepted_algorithms"]
    kex = sshd["kexalgorithms"].split(",")
    # ssh_hardening keeps the wanted algorithms this OpenSSH has; only the post-quantum ones where it has them.
    assert kex and set(kex) <= set(ssh["kex_algorithms"]), "%s: KexAlgorithms %s" % (node.name, kex)
    if not ssh["kex_classic_fallback"] and any(re.match("(mlkem|sntrup)", k) for k in kex):
        assert all(re.match("(mlkem|sntrup)", k) for k in kex), "%s: classic key exchanges: %s" % (node.name, kex)
    host_keys = sshd["hostkey"] if isinstance(sshd["hostkey"], list) else [sshd["hostkey"]]
    assert not [k for k in host_keys if "ecdsa" in k or "dsa_key" in k], host_keys


def test_sshd_listens_on_the_inventory_port(node, expect, sshd):
    port = str(expect["ssh"]["port"])
    ports = sshd["port"] if isinstance(sshd["port"], list) else [sshd["port"]]
    assert port in ports, "%s: sshd is set to ports %s, the inventory says %s" % (node.name, ports, port)
    listening = node.check("ss -Hltn 'sport = :%s'" % port)
    assert listening.strip(), "%s: nothing listens on port %s" % (node.name, port)
    assert node.run("systemctl is-active ssh.service || systemctl is-active sshd.service").rc == 0


def test_sshd_room_for_cluster_nodes_only(node, expect, sshd):
    """MaxSessions is the tight default for any source and the cluster's for the nodes' own addresses."""
    ssh = expect["ssh"]
    nodes = expect.addresses_of(ssh["cluster_nodes"])
    addresses = sorted({a for found in nodes.values() for a in found})
    if not addresses:
        pytest.skip("the inventory gives no IP address for the cluster nodes (DNS names only)")
    user = expect["training_user"]
    outside = sshd_effective(node, user, OUTSIDE)
    assert outside["maxsessions"] == str(ssh["max_sessions"]), outside["maxsessions"]
    for address in addresses:
        inside = sshd_effective(node, user, address)
        assert inside["maxsessions"] == str(ssh["trusted_max_sessions"]), (
            "%s: a connection from cluster node address %s gets MaxSessions %s" % (node.name, address,
                                                                                   inside["maxsessions"]))


def _fail2ban(node, *args):
    return node.check("fail2ban-client " + " ".join(args))


def _listed(out):
    """The addresses fail2ban-client prints as a |- / `- list."""
    return [m.group(1) for m in re.finditer(r"^\s*[|`]-\s*(\S+)\s*$", out, re.M)]


def test_fail2ban_sshd_jail_active(node, expect):
    assert node.run("systemctl is-active fail2ban.service").rc == 0, "%s: fail2ban is not running" % node.name
    status = _fail2ban(node, "status")
    assert re.search(r"Jail list:.*\bsshd\b", status), "%s: no sshd jail: %s" % (node.name, status)
    jail = _fail2ban(node, "status", "sshd")
    assert "Journal matches" in jail or "File list" in jail, jail
    assert _fail2ban(node, "get", "sshd", "maxretry").strip() == str(expect["fail2ban"]["maxretry"])
    actions = _fail2ban(node, "get", "sshd", "actions").splitlines()[1:]
    assert actions, "%s: the sshd jail has no ban action" % node.name
    ports = _fail2ban(node, "get", "sshd", "action", actions[0].strip(), "port")
    assert expect["fail2ban"]["port"] in ports.replace(",", " ").split(), ports


def test_fail2ban_never_bans_the_cluster_nodes(node, expect):
    f2b = expect["fail2ban"]
    ignored = _listed(_fail2ban(node, "get", "sshd", "ignoreip"))
    networks = []
    for entry in ignored:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            pass
    nodes = expect.addresses_of(f2b["cluster_nodes"])
    unnamed = [h for h, found in nodes.items() if not found]
    missing = [(h, a) for h, found in nodes.items() for a in found
               if not any(ipaddress.ip_address(a) in net for net in networks)]
    assert not missing, "%s: fail2ban may ban cluster node(s) %s (ignoreip: %s)" % (node.name, missing, ignored)
    for cidr in list(f2b["trusted_networks"]) + list(f2b["ignoreip_extra"]):
        assert ipaddress.ip_network(cidr, strict=False) in networks, "%s: %s is not in ignoreip %s" % (
            node.name, cidr, ignored)
    # Only loopback, the nodes and the opt-in networks: an outside address must stay bannable.
    assert not any(ipaddress.ip_address(OUTSIDE) in net for net in networks), ignored
    if unnamed:
        warnings.warn("%s: the inventory names %s by DNS name only; their addresses in ignoreip were not checked"
                      % (node.name, ", ".join(unnamed)))
