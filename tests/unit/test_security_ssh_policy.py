# -*- coding: utf-8 -*-
"""Unit tests for plugins/plugin_utils/ssh_policy.py and the filters in plugins/filter/ssh.py.

The outputs are real captures from Debian 13 (OpenSSH 10.0p2 Debian-7+deb13u4) node containers built from
images/node (gpufleet-node:trixie), kept in tests/fixtures/ssh/ with the command and source on top of each: once
with Debian's stock sshd configuration, once after the ssh_hardening role converged (molecule/security, node1).
"""

from conftest import fixture_parts

from ansible_collections.gpufleet.cluster.plugins.filter import ssh as ssh_filter
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ssh_policy import (
    expected_auth_methods,
    parse_kexinit_probe,
    parse_sshd_effective,
    runtime_drift,
)

PROBE_STOCK = fixture_parts("ssh", "probe-stock-trixie.txt")[1]
SSHD_T_STOCK = fixture_parts("ssh", "sshd-t-stock-trixie.txt")[1]
PROBE_HARDENED = fixture_parts("ssh", "probe-hardened-trixie.txt")[1]
SSHD_T_HARDENED = fixture_parts("ssh", "sshd-t-hardened-trixie.txt")[1]


def test_parse_sshd_effective_keeps_multi_valued_keys_as_lists():
    effective = parse_sshd_effective(SSHD_T_HARDENED)
    assert effective["passwordauthentication"] == "no"
    assert effective["permitrootlogin"] == "without-password"
    assert effective["maxstartups"] == "256:30:1024"
    assert effective["hostkey"] == ["/etc/ssh/ssh_host_ed25519_key"]
    assert effective["port"] == ["22"]
    assert effective["kexalgorithms"].split(",")[0] == "mlkem768x25519-sha256"


def test_stock_debian_serves_every_host_key_and_passwords():
    effective = parse_sshd_effective(SSHD_T_STOCK)
    assert len(effective["hostkey"]) == 3
    assert effective["passwordauthentication"] == "yes"
    assert sorted(expected_auth_methods(effective)) == ["password", "publickey"]


def test_probe_reads_the_server_proposal_not_the_client_one():
    probe = parse_kexinit_probe(PROBE_STOCK)
    # The client proposes diffie-hellman-group-exchange; Debian's server does not offer it.
    assert "diffie-hellman-group-exchange-sha256" not in probe["kexalgorithms"]
    assert "ext-info-s" not in probe["kexalgorithms"]
    assert "ecdh-sha2-nistp256" in probe["kexalgorithms"]
    assert probe["auth_methods"] == ["publickey", "password"]
    assert probe["banner"].startswith("OpenSSH_10.0p2")


def test_hardened_probe():
    probe = parse_kexinit_probe(PROBE_HARDENED)
    assert probe["hostkeyalgorithms"] == ["ssh-ed25519"]
    assert probe["macs"] == ["hmac-sha2-512-etm@openssh.com", "hmac-sha2-256-etm@openssh.com", "umac-128-etm@openssh.com"]
    assert probe["auth_methods"] == ["publickey"]


def test_no_drift_when_the_daemon_serves_the_disk_config():
    assert runtime_drift(parse_kexinit_probe(PROBE_HARDENED), parse_sshd_effective(SSHD_T_HARDENED)) == []
    assert runtime_drift(parse_kexinit_probe(PROBE_STOCK), parse_sshd_effective(SSHD_T_STOCK)) == []


def test_drift_when_the_reload_was_lost():
    # The hardened file is on disk but the daemon still runs Debian's stock configuration.
    drift = runtime_drift(parse_kexinit_probe(PROBE_STOCK), parse_sshd_effective(SSHD_T_HARDENED))
    text = " ".join(drift)
    assert "kexalgorithms" in text
    assert "macs" in text
    assert "authentication: live publickey,password, configured publickey" in text
    assert ssh_filter.sshd_runtime_drift(PROBE_STOCK, SSHD_T_HARDENED) == drift


def test_drift_when_the_probe_never_reached_sshd():
    drift = runtime_drift(parse_kexinit_probe("ssh: connect to host 127.0.0.1 port 22: Connection refused\n"), {})
    assert drift and "did not reach" in drift[0]


def test_filter_module_names():
    names = ssh_filter.FilterModule().filters()
    assert set(names) == {"sshd_effective", "ssh_kexinit", "sshd_runtime_drift", "cluster_known_hosts",
                          "hosts_without_address", "known_hosts_by_port", "ssh_keypair_drift", "lockout_problems",
                          "controller_address_outside"}
