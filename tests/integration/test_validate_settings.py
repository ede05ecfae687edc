"""validate run as playbooks/validate.yml runs it, on its own: the image, key, launcher, hostfile, sshd port and
training user come from the shared settings (roles/gpufleet_defaults, its dependency) before its first task, with no
other role in the play; another role's own knob set in the inventory moves that role only. In check mode on
localhost (read-only checks, loopback only) it prints the fleet report and writes no report file."""
import json
import os
import subprocess
import sys

import yaml

from conftest import COLLECTIONS, ROOT

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

PLAY = """
- name: validate alone, on this machine
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.cluster.validate
  post_tasks:
    - name: Keep what validate resolved
      ansible.builtin.copy:
        content: "{{ resolved | to_json }}"
        dest: "{{ resolved_file }}"
        mode: "0600"
      check_mode: false
      vars:
        resolved:
          image: "{{ validate_image }}"
          key: "{{ validate_image_key }}"
          launcher: "{{ validate_launcher }}"
          record: "{{ validate_image_record }}"
          ssh_port: "{{ validate_ssh_port }}"
          training_user: "{{ validate_training_user }}"
          gpudirect: "{{ validate_gpudirect_preference }}"
          hostfile: "{{ validate_mpi_hostfile }}"
          exporter_port: "{{ validate_node_exporter_port }}"
          verdict: "{{ validate_verdict }}"
"""


def test_validate_alone_reads_the_shared_settings_and_check_mode_writes_no_report(tmp_path):
    key = tmp_path / "fleet.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n")
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    extra = {
        "resolved_file": str(tmp_path / "resolved.json"),
        "validate_report_root": str(tmp_path / "reports"),
        "validate_fail_on_failure": False,
        # Shared settings as an inventory gives them; nothing of image_security, ssh_hardening, cluster_ssh or
        # interconnect runs in this play.
        "gpufleet_image": "registry.example/gpufleet/training:cpu",
        "gpufleet_cosign_public_key_file": str(key),
        "gpufleet_ssh_port": 2222,
        "gpufleet_training_user": "trainer",
        "interconnect_peermem": False,
        "gpufleet_hostfile_path": str(tmp_path / "hostfile"),
        # Another role's own knob moves that role alone.
        "image_security_launcher_path": "/opt/elsewhere/gpufleet-run-image",
        "ansible_python_interpreter": sys.executable,
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=os.path.join(str(tmp_path), "none.cfg"))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", "--check", "-e", json.dumps(extra),
                           str(play)], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    resolved = json.loads((tmp_path / "resolved.json").read_text())
    with open(os.path.join(ROOT, "roles", "gpufleet_defaults", "defaults", "main.yml")) as handle:
        shared = yaml.safe_load(handle)
    assert resolved["image"] == "registry.example/gpufleet/training:cpu"
    assert resolved["key"] == key.read_text().rstrip("\n")
    # Unset in the play: the shared defaults (image_security_launcher_path moved image_security only).
    assert resolved["launcher"] == shared["gpufleet_launcher_path"]
    assert resolved["record"] == shared["gpufleet_image_record_path"]
    assert int(resolved["ssh_port"]) == 2222
    assert resolved["training_user"] == "trainer"
    # The deprecated interconnect_peermem false still means no GPUDirect RDMA, as interconnect reads it.
    assert resolved["gpudirect"] == "none"
    assert resolved["hostfile"] == str(tmp_path / "hostfile")
    assert int(resolved["exporter_port"]) == 9100
    # The MPI step looked for the hostfile the shared setting names, and failed without it.
    assert "no MPI hostfile at %s" % (tmp_path / "hostfile") in proc.stdout
    assert resolved["verdict"] == "failed"

    # Check mode: the fleet report is printed, no report file is written.
    assert "# gpufleet validation" in proc.stdout
    assert not (tmp_path / "reports").exists()


def test_validate_refuses_more_nodes_than_forks_before_any_check(tmp_path):
    # DDP across the nodes and the pair runs need every node at once: two nodes with --forks 1 would leave the first
    # waiting for the second until its run timed out. The role refuses before its first check.
    play = tmp_path / "play.yml"
    play.write_text(PLAY.replace("hosts: localhost", "hosts: all"))
    extra = {"resolved_file": str(tmp_path / "resolved.json"), "validate_report_root": str(tmp_path / "reports"),
             "ansible_python_interpreter": sys.executable, "ansible_connection": "local"}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=os.path.join(str(tmp_path), "none.cfg"))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "node-a,node-b,", "--forks", "1", "--check", "-e", json.dumps(extra),
                           str(play)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode != 0
    assert "validate runs DDP across the 2 nodes of the play at once, but Ansible runs 1 at a time" in proc.stdout
    assert "run with --forks 2 or more" in proc.stdout
    assert "Check the GPU topology" not in proc.stdout
