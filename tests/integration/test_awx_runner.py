"""The project run the way AWX / Automation Platform runs it (docs/awx.md), without AWX itself.

AWX runs a job template with ansible-runner over a private data directory: project/ is the project checkout,
inventory/hosts an executable script that prints the inventory as JSON (as `ansible-inventory --list --export`
gives it from the project's inventory source), the collection path from the project's ansible.cfg behind its own
requirements directory, and the vault password answered at the `Vault password:` prompt. These tests lay out such
a directory around a copy of this project's tracked files and run the job templates' playbooks through
ansible_runner.run: a syntax check of each against inventories/prod, and real runs on a local node.
"""
import configparser
import json
import os
import shutil
import subprocess
import sys

import ansible_runner
import pytest

from conftest import ROOT

BIN = os.path.dirname(sys.executable)
# The job templates of docs/awx.md.
JOB_TEMPLATES = ["site.yml", "playbooks/onboard.yml", "playbooks/validate.yml", "playbooks/upgrade_driver.yml"]
# AWX's prompt for a vault credential's password (awx/main/tasks/jobs.py, RunJob.get_password_prompts).
VAULT_PROMPT = r"Vault password:\s*?$"
VAULT_PASSWORD = "awx-vault-test-password"


def _tool(name):
    return os.path.join(BIN, name)


def _copy_project(dest):
    """The tracked files, as AWX's project update checks the repository out (symlinks kept)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in tracked.decode().split("\0"):
        if not rel:
            continue
        src, dst = os.path.join(ROOT, rel), os.path.join(dest, rel)
        if not os.path.lexists(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _inventory_script(private_data_dir, source, env):
    """inventory/hosts as AWX writes it: a script printing what the inventory source synced (its sync runs
    `ansible-inventory --list --export -i <source> --playbook-dir <source's directory>`)."""
    project = os.path.join(private_data_dir, "project")
    listed = subprocess.run([_tool("ansible-inventory"), "--list", "--export", "-i", source,
                             "--playbook-dir", os.path.dirname(os.path.join(project, source))],
                            capture_output=True, text=True, env=env, cwd=project, check=False)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    os.makedirs(os.path.join(private_data_dir, "inventory"), exist_ok=True)
    path = os.path.join(private_data_dir, "inventory", "hosts")
    with open(path, "w") as handle:
        handle.write("#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n" % json.dumps(data))
    os.chmod(path, 0o700)
    return path, data


def _awx_collections_path(private_data_dir):
    """ANSIBLE_COLLECTIONS_PATH as AWX builds it: its requirements directory, then the project's ansible.cfg
    collections_path, then the defaults (RunJob.build_env)."""
    config = configparser.ConfigParser()
    config.read(os.path.join(private_data_dir, "project", "ansible.cfg"))
    defaults = ["~/.ansible/collections", "/usr/share/ansible/collections"]
    paths = [config.get("defaults", "collections_path")] + defaults
    return os.pathsep.join([os.path.join(private_data_dir, "requirements_collections")] + paths)


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    private_data_dir = str(tmp_path_factory.mktemp("awx-job"))
    _copy_project(os.path.join(private_data_dir, "project"))
    os.makedirs(os.path.join(private_data_dir, "env"))
    os.makedirs(os.path.join(private_data_dir, "requirements_collections"))
    return private_data_dir


@pytest.fixture()
def awx_env(monkeypatch, job_dir):
    """The job's environment: no ANSIBLE_CONFIG (ansible reads project/ansible.cfg from the working directory),
    AWX's collection path and host key setting, this venv's tools first on PATH."""
    for name in list(os.environ):
        if name.startswith("ANSIBLE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", BIN + os.pathsep + os.environ.get("PATH", ""))
    env = {
        "ANSIBLE_COLLECTIONS_PATH": _awx_collections_path(job_dir),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
    }
    return env


def _run(job_dir, env, ident, **kwargs):
    return ansible_runner.run(private_data_dir=job_dir, ident=ident, envvars=env, quiet=True,
                              suppress_env_files=True, **kwargs)


def test_job_templates_pass_a_syntax_check_against_the_prod_inventory(job_dir, awx_env):
    inventory, data = _inventory_script(job_dir, "inventories/prod/hosts.yml", dict(os.environ, **awx_env))
    # The synced inventory has the groups the playbooks use and the group_vars next to the source.
    assert sorted(data["gpu_nodes"]["hosts"]) == ["gpu-h100-01", "gpu-h100-02", "gpu-h100-03", "gpu-h100-04"]
    assert data["login_nodes"]["hosts"] == ["login-01"]
    assert data["all"]["vars"]["gpufleet_admin_user"] == "gpufleet-admin"
    for number, playbook in enumerate(JOB_TEMPLATES):
        run = _run(job_dir, awx_env, "syntax-%d" % number, playbook=playbook, inventory=inventory,
                   cmdline="--syntax-check")
        out = run.stdout.read()
        assert (run.status, run.rc) == ("successful", 0), "%s: %s" % (playbook, out[-2000:])
        assert "playbook: %s" % playbook in out


def test_validate_job_targets_every_node_and_a_limit_narrows_it(job_dir, awx_env):
    inventory, _unused = _inventory_script(job_dir, "inventories/prod/hosts.yml", dict(os.environ, **awx_env))
    run = _run(job_dir, awx_env, "list-all", playbook="playbooks/validate.yml", inventory=inventory,
               cmdline="--list-hosts")
    out = run.stdout.read()
    assert run.status == "successful", out[-2000:]
    assert "hosts (5)" in out
    for host in ["gpu-h100-01", "gpu-h100-04", "login-01"]:
        assert host in out
    run = _run(job_dir, awx_env, "list-limit", playbook="playbooks/upgrade_driver.yml", inventory=inventory,
               cmdline="--list-hosts --limit gpu-h100-02")
    out = run.stdout.read()
    assert run.status == "successful", out[-2000:]
    assert "hosts (1)" in out and "gpu-h100-02" in out and "login-01" not in out


@pytest.fixture()
def local_node_inventory(job_dir, awx_env, tmp_path):
    """One GPU-group node reached with the local connection; its group vars carry an inline-vaulted value, synced
    the way AWX syncs an inventory source (`ansible-inventory --list --export`, no vault password)."""
    source = tmp_path / "inventory"
    (source / "group_vars").mkdir(parents=True)
    (source / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-local-01:\n"
        "          ansible_connection: local\n          ansible_python_interpreter: %s\n"
        "    login_nodes:\n      hosts: {}\n" % sys.executable)
    password_file = tmp_path / "vault-password"
    password_file.write_text(VAULT_PASSWORD + "\n")
    encrypted = subprocess.run(
        [_tool("ansible-vault"), "encrypt_string", "--vault-password-file", str(password_file),
         "--name", "image_security_registry_password", "registry-token-for-the-test"],
        capture_output=True, text=True, check=True, env=dict(os.environ, **awx_env)).stdout
    (source / "group_vars" / "gpu_nodes.yml").write_text("---\n" + encrypted)
    inventory, data = _inventory_script(job_dir, str(source / "hosts.yml"), dict(os.environ, **awx_env))
    # Synced without the password: the value stays encrypted in the inventory.
    synced = data["gpu_nodes"]["vars"]["image_security_registry_password"]
    assert set(synced) == {"__ansible_vault"} and synced["__ansible_vault"].startswith("$ANSIBLE_VAULT;1.1;AES256")
    return inventory


def _events(run, event):
    return [e for e in run.events if e.get("event") == event]


def test_site_preflight_check_run_resolves_the_collection_from_the_project(job_dir, awx_env, local_node_inventory):
    # With AWX's collection path, gpufleet.cluster is the project's own copy (collections/ links to its root).
    project = os.path.join(job_dir, "project")
    listed = subprocess.run([_tool("ansible-galaxy"), "collection", "list", "gpufleet.cluster"], cwd=project,
                            capture_output=True, text=True, env=dict(os.environ, **awx_env), check=False)
    homes = [line[2:] for line in listed.stdout.splitlines() if line.startswith("# ")]
    expected = os.path.realpath(os.path.join(project, "collections", "ansible_collections"))
    assert [os.path.realpath(h) for h in homes] == [expected]
    run = _run(job_dir, awx_env, "site-check", playbook="site.yml", inventory=local_node_inventory,
               cmdline="--check --tags preflight")
    out = run.stdout.read()
    assert (run.status, run.rc) == ("successful", 0), out[-3000:]
    plays = [e["event_data"]["play"] for e in _events(run, "playbook_on_play_start")]
    assert plays[:3] == ["Detect the nodes", "NVIDIA driver", "Container runtime"]
    # The collection's own module ran on the node and returned what this machine's os-release says.
    detected = [e["event_data"] for e in _events(run, "runner_on_ok")
                if e["event_data"].get("task") == "Detect OS, NVIDIA devices, RDMA HCAs, Secure Boot and container"]
    assert [d["host"] for d in detected] == ["gpu-local-01"]
    assert detected[0]["resolved_action"] == "gpufleet.cluster.node_facts"
    with open("/etc/os-release") as handle:
        os_id = dict(line.strip().split("=", 1) for line in handle if "=" in line)["ID"].strip('"')
    assert detected[0]["res"]["ansible_facts"]["gpufleet_node"]["os"]["id"] == os_id
    # Check mode changed nothing; nothing failed.
    stats = _events(run, "playbook_on_stats")[-1]["event_data"]
    assert stats["failures"] == {} and stats["dark"] == {} and stats["changed"] == {}
    assert stats["ok"]["gpu-local-01"] >= 3


def test_vault_credential_decrypts_the_synced_inline_value(job_dir, awx_env, local_node_inventory):
    check = {"host_pattern": "gpu_nodes", "module": "ansible.builtin.assert",
             "module_args": "that=\"image_security_registry_password == 'registry-token-for-the-test'\""}
    # Without the credential the job cannot read the value.
    run = _run(job_dir, awx_env, "vault-none", inventory=local_node_inventory, **check)
    out = run.stdout.read()
    assert run.status == "failed", out[-2000:]
    assert "no vault secrets" in out
    # With it, AWX adds --ask-vault-pass and answers the prompt.
    run = _run(job_dir, awx_env, "vault-given", inventory=local_node_inventory, cmdline="--ask-vault-pass",
               passwords={VAULT_PROMPT: VAULT_PASSWORD}, **check)
    out = run.stdout.read()
    assert run.status == "successful", out[-2000:]
    assert [e["event_data"]["host"] for e in _events(run, "runner_on_ok")] == ["gpu-local-01"]
    assert VAULT_PASSWORD not in out and "registry-token-for-the-test" not in out


def test_whole_file_vaulted_group_vars_do_not_sync_without_the_password(job_dir, awx_env, tmp_path):
    """Why docs/awx.md asks for inline-vaulted values: an inventory source sync runs without vault secrets."""
    source = tmp_path / "inventory"
    (source / "group_vars").mkdir(parents=True)
    (source / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-a: {}\n")
    (source / "group_vars" / "gpu_nodes.yml").write_text("---\nimage_security_registry_password: token\n")
    password_file = tmp_path / "vault-password"
    password_file.write_text(VAULT_PASSWORD + "\n")
    env = dict(os.environ, **awx_env)
    subprocess.run([_tool("ansible-vault"), "encrypt", "--vault-password-file", str(password_file),
                    str(source / "group_vars" / "gpu_nodes.yml")], capture_output=True, check=True, env=env)
    listed = subprocess.run([_tool("ansible-inventory"), "-i", str(source / "hosts.yml"), "--list", "--export"],
                            capture_output=True, text=True, env=env, check=False)
    assert listed.returncode != 0
    assert "no vault secrets" in listed.stderr


@pytest.mark.parametrize("host_vars, strict_off", [({}, True), ({"ansible_host_key_checking": True}, False)])
def test_inventory_host_key_checking_wins_over_awx_environment(job_dir, awx_env, host_vars, strict_off):
    """AWX sets ANSIBLE_HOST_KEY_CHECKING=False in every job; docs/awx.md turns checking back on from the inventory.
    The node is a closed local port: only the ssh command line ansible builds is looked at."""
    hostvars = dict({"ansible_host": "127.0.0.1", "ansible_port": 1}, **host_vars)
    path = os.path.join(job_dir, "inventory", "hosts")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("#! /usr/bin/env python3\nprint(%r)\n" % json.dumps(
            {"gpu_nodes": {"hosts": ["gpu-closed-01"]}, "_meta": {"hostvars": {"gpu-closed-01": hostvars}}}))
    os.chmod(path, 0o700)
    run = _run(job_dir, awx_env, "hostkey-%s" % bool(host_vars), inventory=path, host_pattern="gpu_nodes",
               module="ansible.builtin.ping", cmdline="-vvv")
    out = run.stdout.read()
    assert run.status == "failed"  # nothing listens there
    ssh = [line for line in out.splitlines() if "SSH: EXEC ssh " in line]
    assert ssh, out[-2000:]
    assert ("StrictHostKeyChecking=no" in ssh[0]) is strict_off
