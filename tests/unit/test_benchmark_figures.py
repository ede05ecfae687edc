"""scripts/benchmark.py: the goals, the fitted line and its projection and the peer's run set-up (everything but
the lab runs themselves)."""
import argparse
import os
import subprocess
import sys
import time

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import benchmark  # noqa: E402  (scripts/ is not a package)


def test_sizes_are_sorted_distinct_node_counts():
    assert benchmark.parse_sizes("4,1,2,2") == [1, 2, 4]
    assert benchmark.parse_sizes("1") == [1]
    for bad in ("", "0,1", "1,201", "one,two"):
        with pytest.raises(argparse.ArgumentTypeError):
            benchmark.parse_sizes(bad)


def test_fit_line_through_exact_points():
    a, b = benchmark.fit_line([(1, 12.0), (2, 19.0), (4, 33.0)])
    assert a == pytest.approx(5.0)
    assert b == pytest.approx(7.0)


def test_fit_line_is_least_squares():
    # y = 1 + 2x with residuals +1, -2, +1 at x = 1, 2, 3: the least-squares line is y = 1 + 2x again.
    a, b = benchmark.fit_line([(1, 4.0), (2, 3.0), (3, 8.0)])
    assert b == pytest.approx(2.0)
    assert a == pytest.approx(1.0)


def test_fit_line_needs_two_sizes():
    with pytest.raises(ValueError, match="two different fleet sizes"):
        benchmark.fit_line([(2, 10.0), (2, 11.0)])


def test_cores_needed_for_a_window():
    # 30 s + 9 s per node: 100 nodes are 930 s of CPU, 1.033 cores over 15 minutes.
    assert benchmark.cores_needed(30.0, 9.0, 100) == pytest.approx(930.0 / 900.0)
    assert benchmark.cores_needed(30.0, 9.0, 1000, window=60) == pytest.approx(9030.0 / 60.0)


def test_projection_lines_say_measured_and_projected_apart():
    lines = benchmark.projection_lines([(1, 20.0), (2, 30.0), (4, 50.0)])
    text = "\n".join(lines)
    assert lines[0] == "controller CPU per no-op run (measured):"
    assert "   1 node :    20.0s,   20.0s per node" in text
    assert "   4 nodes:    50.0s,   12.5s per node" in text
    assert "controller CPU = 10.0s + 10.00s x nodes" in text
    assert "projection from that line, not a measurement" in text
    # 10 + 10 * 100 = 1010 s over 900 s; 10 + 10 * 1000 = 10010 s over 900 s.
    assert " 100 nodes:     1010s of controller CPU ->   1.1 cores" in text
    assert "1000 nodes:    10010s of controller CPU ->  11.1 cores" in text


def test_projection_lines_with_one_size_say_why_there_is_no_line():
    lines = benchmark.projection_lines([(1, 20.0)])
    assert lines[-1] == "line and projection: not computed (a line needs runs at two different fleet sizes at least)"
    assert not any("cores" in line for line in lines)


def test_peer_ratio_line_pass_miss_and_not_measured():
    assert benchmark.peer_ratio_line(30.0, 100.0).endswith("30.0s / 100.0s = 0.30 (goal <= 0.35) PASS")
    assert benchmark.peer_ratio_line(46.0, 100.0).endswith("46.0s / 100.0s = 0.46 (goal <= 0.35) MISS")
    line = benchmark.peer_ratio_line(46.0, None, why_not="no --peer given and $GPUFLEET_PEER_DEVSEC is not set")
    assert line.endswith("not measured (no --peer given and $GPUFLEET_PEER_DEVSEC is not set)")
    assert "PASS" not in line and "MISS" not in line


def test_per_node_goal_passes_only_when_every_size_does():
    line = benchmark.per_node_goal_line("controller CPU per node per no-op run", {1: 9.0, 2: 8.0}, 10.0)
    assert line.endswith("9.0s at 1 node, 8.0s at 2 nodes (goal <= 10s at every size) PASS")
    assert benchmark.per_node_goal_line("x", {1: 12.0, 4: 8.0}, 10.0).endswith("MISS")
    assert benchmark.per_node_goal_line("x", {1: None, 2: 8.0}, 10.0).endswith(
        "8.0s at 2 nodes (goal <= 10s at every size; not read at 1) PASS")
    assert benchmark.per_node_goal_line("x", {1: None}, 10.0).endswith("not measured (no figure at any size)")


def fake_peer(tmp_path, namespace="devsec", name="hardening", roles=benchmark.PEER_ROLES):
    peer = tmp_path / "peer"
    for role in roles:
        (peer / "roles" / role / "tasks").mkdir(parents=True)
    (peer / "galaxy.yml").write_text("namespace: %s\nname: %s\nversion: 10.0.0\n" % (namespace, name))
    return peer


def test_check_peer_takes_devsec_hardening_only(tmp_path):
    assert benchmark.check_peer(str(fake_peer(tmp_path))) == str(tmp_path / "peer")
    with pytest.raises(ValueError, match="is community.hardening, not devsec.hardening"):
        benchmark.check_peer(str(fake_peer(tmp_path / "a", namespace="community")))
    with pytest.raises(ValueError, match="has no roles/ssh_hardening"):
        benchmark.check_peer(str(fake_peer(tmp_path / "b", roles=("os_hardening",))))
    with pytest.raises(ValueError, match="has no galaxy.yml"):
        benchmark.check_peer(str(tmp_path / "nowhere"))


def test_peer_collections_root_links_the_peer_as_devsec_hardening(tmp_path):
    peer = fake_peer(tmp_path)
    root = benchmark.peer_collections_root(str(tmp_path / "work"), str(peer))
    link = os.path.join(root, "ansible_collections", "devsec", "hardening")
    assert os.path.islink(link) and os.path.realpath(link) == str(peer)
    assert os.path.isdir(os.path.join(link, "roles", "ssh_hardening"))
    # Made again in the same folder (a second run), it still points at the peer.
    assert benchmark.peer_collections_root(str(tmp_path / "work"), str(peer)) == root
    assert os.path.realpath(link) == str(peer)


def test_peer_env_is_its_own_collections_root_and_fact_cache(tmp_path):
    env = benchmark.peer_env("/tmp/w/collections", "/tmp/w/facts")
    assert env == {"ANSIBLE_COLLECTIONS_PATH": "/tmp/w/collections", "ANSIBLE_CACHE_PLUGIN": "jsonfile",
                   "ANSIBLE_CACHE_PLUGIN_CONNECTION": "/tmp/w/facts"}
    assert os.path.join(ROOT, ".cache", "facts") not in env.values()


def test_peer_playbook_applies_both_roles_with_full_facts():
    plays = yaml.safe_load(benchmark.peer_playbook())
    assert len(plays) == 1
    play = plays[0]
    assert play["hosts"] == "lab-peer"
    assert play["gather_facts"] is True and play["gather_subset"] == ["all"]
    assert play["become"] is True
    assert play["roles"] == ["devsec.hardening.os_hardening", "devsec.hardening.ssh_hardening"]
    # Only the container's limit is set; nothing of dev-sec's SSH policy is relaxed for the lab.
    assert play["vars"] == {"os_auditd_enabled": False}


def test_peer_inventory_reaches_the_admin_account_with_the_lab_key():
    text = benchmark.peer_inventory("172.30.240.6", "/lab/id_ed25519", "/w/peer_known_hosts")
    host = yaml.safe_load(text)["all"]["hosts"]["lab-peer"]
    assert host["ansible_host"] == "172.30.240.6"
    assert host["ansible_user"] == "gpufleet-admin"
    assert host["ansible_become"] is True
    assert host["ansible_ssh_private_key_file"] == "/lab/id_ed25519"
    args = host["ansible_ssh_common_args"].split()
    assert "UserKnownHostsFile=/w/peer_known_hosts" in args
    assert "StrictHostKeyChecking=yes" in args and "IdentitiesOnly=yes" in args


def test_peer_address_is_free_in_the_lab_subnet():
    import lab
    taken = {lab.registry_address()} | {lab.node_address(index) for index in range(1, 201)}
    assert benchmark.peer_address() not in taken
    assert benchmark.peer_address().startswith(str(lab.SUBNET.network_address)[:-1])


def test_left_over_ssh_masters_are_ended_and_reaped(tmp_path):
    # A stand-in for an SSH ControlPersist master: a process named ssh that outlives the run.
    fake_ssh = tmp_path / "ssh"
    fake_ssh.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(fake_ssh), "60"])
    time.sleep(0.2)
    assert benchmark._child_processes().get(proc.pid) == "ssh"
    benchmark.end_leftovers()
    assert proc.pid not in benchmark._child_processes()
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
