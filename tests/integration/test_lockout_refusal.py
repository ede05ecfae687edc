"""The operator cannot lock themselves out: ssh_hardening and os_hardening run for real with ansible-playbook on
localhost (-c local), given the SSH session preflight would have kept (preflight_ssh_session, as node_facts returns
it over SSH) as an extra var, since a local connection has none of its own.

Both roles write fixed /etc paths (the sshd drop-in under /etc/ssh/sshd_config.d, the nftables policy under
/etc/nftables.d), so the refusals are checked where they happen: before the first task that installs or writes
anything. Each refused run must fail with the message naming the setting, report nothing changed, and leave the
files it would have written absent and /etc/ssh and /etc/nftables.d as they were. The run that gets past the check
is made in --check mode and stops at the first read of sshd (no sshd here), after the check passed."""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

PLAYBOOK = """
- name: Run the role
  hosts: localhost
  gather_facts: false
  vars:
    gpufleet_node:
      gpu_count: 0
      os: {{id: debian, major: "13", family: Debian, codename: trixie}}
  tasks:
    - name: Run the {role} role
      ansible.builtin.include_role:
        name: gpufleet.cluster.{role}
"""

# node_facts' ssh_session for an inventory that connects as root (ansible_user: root) from 10.0.0.5.
ROOT_SESSION = {"client_address": "10.0.0.5", "client_port": 51234, "server_address": "10.0.0.11", "server_port": 22,
                "uid": 0, "user": "root", "groups": ["root"]}
DROPIN = "99-gpufleet-lockout-test.conf"
WATCHED = ("/etc/ssh", "/etc/nftables.d")


def snapshot():
    """Path -> (size, mtime) of everything under the folders the roles would write in."""
    found = {}
    for top in WATCHED:
        for folder, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                stat = os.lstat(path)
                found[path] = (stat.st_size, stat.st_mtime_ns)
    return found


def run_role(tmp_path, role, *flags, **extra_vars):
    extra = {"ansible_python_interpreter": sys.executable, "ssh_hardening_dropin_name": DROPIN}
    extra.update(extra_vars)
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK.format(role=role))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"))
    before = snapshot()
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(play), "-e", json.dumps(extra)]
                          + list(flags), cwd=ROOT, env=env, capture_output=True, check=False, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    changed = None
    for line in out.splitlines():
        if line.startswith("localhost") and "changed=" in line:
            changed = int(line.split("changed=")[1].split()[0])
    assert snapshot() == before, "the run changed files under %s" % ", ".join(WATCHED)
    return proc.returncode, " ".join(out.split()), changed


def test_root_session_with_permit_root_login_no_is_refused(tmp_path):
    rc, out, changed = run_role(tmp_path, "ssh_hardening", preflight_ssh_session=ROOT_SESSION,
                                ssh_hardening_permit_root_login="no")
    assert rc != 0, out
    assert "TASK [gpufleet.cluster.ssh_hardening : Refuse sshd settings that would lock Ansible out]" in out
    assert "ssh_hardening_permit_root_login no would refuse root's next login" in out, out
    assert "set ssh_hardening_permit_root_login to prohibit-password" in out and "Nothing was changed." in out
    assert changed == 0, out
    assert not os.path.exists(os.path.join("/etc/ssh/sshd_config.d", DROPIN))


def test_account_outside_allow_groups_is_refused(tmp_path):
    session = dict(ROOT_SESSION, uid=1005, user="ops", groups=["adm", "ops"])
    rc, out, changed = run_role(tmp_path, "ssh_hardening", preflight_ssh_session=session,
                                ssh_hardening_allow_groups=["gpuadmin", "train"])
    assert rc != 0, out
    assert "whose groups (adm, ops) share none with AllowGroups (gpuadmin, train)" in out, out
    assert "ssh_hardening_allow_groups" in out and "Nothing was changed." in out
    assert changed == 0, out
    assert not os.path.exists(os.path.join("/etc/ssh/sshd_config.d", DROPIN))


def test_root_session_with_prohibit_password_gets_past_the_check(tmp_path):
    # --check, and the package already "installed" for this run: the next task that acts reads sshd -T, which this
    # machine lacks; the run stops there, after the check passed.
    installed = {"openssh-server": [{"name": "openssh-server", "version": "1:10.0p1-7", "arch": "amd64",
                                     "source": "apt"}]}
    rc, out, _changed = run_role(tmp_path, "ssh_hardening", "--check", preflight_ssh_session=ROOT_SESSION,
                                 ssh_hardening_permit_root_login="prohibit-password", preflight_packages=installed)
    assert re.search(r"Refuse sshd settings that would lock Ansible out\] \**\s*ok: \[localhost\]", out), out
    assert "would refuse" not in out and "Nothing was changed" not in out


def test_nftables_policy_closing_ssh_to_the_controller_is_refused(tmp_path):
    session = dict(ROOT_SESSION, client_address="203.0.113.7")
    rc, out, changed = run_role(tmp_path, "os_hardening", preflight_ssh_session=session, os_hardening_nftables=True,
                                gpufleet_admin_networks=["192.0.2.0/24"])
    assert rc != 0, out
    assert "TASK [gpufleet.cluster.os_hardening : Refuse an nftables policy that would close SSH to Ansible]" in out
    assert "203.0.113.7, is neither in os_hardening_admin_networks" in out, out
    assert "Nothing was changed." in out
    assert changed == 0, out
    assert not os.path.exists("/etc/nftables.d/gpufleet.nft")
