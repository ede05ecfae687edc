"""scripts/lab.py: what it says when it cannot run a playbook, before anything is started, and how it reads systemd's
journal after a no-op run."""
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import lab  # noqa: E402  (scripts/ is not a package)


def test_missing_ansible_playbook_is_a_clear_message(monkeypatch):
    monkeypatch.setattr(lab.shutil, "which", lambda name, path=None: None)
    with pytest.raises(SystemExit) as stop:
        lab.run_playbook("site.yml")
    message = str(stop.value)
    assert message.startswith("lab: ansible-playbook was not found beside %s nor on PATH" % sys.executable)
    assert "make lab" in message and ".venv/bin" in message


def test_no_running_lab_is_a_clear_message(monkeypatch, tmp_path):
    monkeypatch.setattr(lab, "INVENTORY", str(tmp_path / "hosts.yml"))
    with pytest.raises(SystemExit) as stop:
        lab.run_playbook("site.yml")
    assert "no lab is running" in str(stop.value) and "make lab" in str(stop.value)


def test_the_interpreters_tools_come_first_on_path(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert lab.tool_path().split(os.pathsep) == [os.path.dirname(sys.executable), "/usr/bin", "/bin"]


def test_run_passes_ansible_playbook_options_through(monkeypatch):
    calls = []
    monkeypatch.setattr(lab, "run_playbook", lambda *args, **kwargs: calls.append(args) or (0, {}))
    assert lab.main(["run", "--tags", "fail2ban", "--limit", "lab-node1"]) == 0
    assert lab.main(["run", "--", "-v"]) == 0
    assert calls == [("site.yml", "--tags", "fail2ban", "--limit", "lab-node1"), ("site.yml", "-v")]


def test_lab_nodes_are_the_molecule_node_containers():
    args = lab.container_args("gpufleet-lab-node1", "lab-node1", "172.30.240.11")
    options, command = lab.node_container_options()
    assert args[-len(command) - 1:] == [lab.IMAGE] + command == [lab.IMAGE, "/lib/systemd/systemd"]
    pairs = set(zip(args, args[1:]))
    for pair in (("--cap-add", "SYS_ADMIN"), ("--cap-add", "NET_ADMIN"), ("--cap-add", "NET_RAW"),
                 ("--security-opt", "seccomp=unconfined"), ("--security-opt", "apparmor=unconfined"),
                 ("--cgroupns", "host"), ("-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"), ("-v", "/var/lib/docker"),
                 ("--tmpfs", "/run"), ("--tmpfs", "/run/lock")):
        assert pair in pairs, pair
    assert "--privileged" not in args


def test_a_node_setting_the_lab_cannot_pass_is_a_clear_message(tmp_path):
    base = tmp_path / "config.yml"
    base.write_text("provisioner: {inventory: {group_vars: {all: {gpufleet_molecule_node: "
                    "{command: /sbin/init, devices: [/dev/fuse]}}}}}\n")
    with pytest.raises(SystemExit) as stop:
        lab.node_container_options(str(base))
    assert "sets devices for node containers" in str(stop.value)


def test_systemd_noise_is_what_a_reload_start_or_stop_logs():
    # Lines systemd 257 (Debian 13) logs under _PID=1, as `journalctl _PID=1 -o cat` prints them.
    noisy = ["Reload requested from client PID 34231 ('systemctl') (unit -.slice)...", "Reloading...",
             "Reloading finished in 261 ms.", "Starting fail2ban.service - Fail2Ban Service...",
             "Stopped docker.service - Docker Application Container Engine."]
    quiet = ["Starting sysstat-collect.service - system activity accounting tool...",
             "Started session-4.scope - Session 4 of User admin.", "session-4.scope: Deactivated successfully."]
    assert [line for line in noisy + quiet if lab.SYSTEMD_NOISE.search(line)] == noisy


# Lines as systemd 257 (Debian 13) logs them; the first reload is the hourly apt-listchanges job disabling its timer.
NODE_OWN = ["Reload requested from client PID 35488 ('systemctl') (unit apt-listchanges.service)...", "Reloading...",
            "Reloading finished in 217 ms.", "Starting apt-listchanges.service - Initialize apt-listchanges database"]
RUNS_OWN = ["Reload requested from client PID 4101 ('systemctl')...", "Reloading...", "Reloading finished in 190 ms."]


@pytest.mark.parametrize("journal, noise", [
    (NODE_OWN, []),
    (RUNS_OWN, RUNS_OWN),
    (NODE_OWN + RUNS_OWN, RUNS_OWN),
    (NODE_OWN[:3] + RUNS_OWN[1:], RUNS_OWN[1:]),
    (["Stopping docker.service - Docker Application Container Engine", "Started session-3.scope"],
     ["Stopping docker.service - Docker Application Container Engine"])])
def test_only_the_reloads_the_node_asked_for_itself_are_not_the_runs(monkeypatch, journal, noise):
    monkeypatch.setattr(lab, "sh", lambda cmd, capture=False: type("Out", (), {"stdout": "\n".join(journal)}))
    assert lab.systemd_noise(1, "cursor") == noise
