"""The settings validate checks come from the roles that own them: each owner's `published` entry point resolves
them with its own defaults, and validate's defaults read only what was published. Run for real with
ansible-playbook on localhost (nothing on the host is changed: the entry points only set facts)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
VALIDATED = ["validate_image", "validate_image_key", "validate_registry_username", "validate_registry_password",
             "validate_image_ignore_tlog", "validate_image_insecure_registry", "validate_image_require_tag_annotation",
             "validate_image_record", "validate_launcher", "validate_fabric_env", "validate_mpi_hostfile",
             "validate_gpudirect_preference", "validate_ssh_port", "validate_node_exporter_port",
             "validate_textfile_dir"]

PLAYBOOK = """
- name: Resolve validate's defaults from what the owning roles publish
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the published settings
      ansible.builtin.include_role:
        name: "gpufleet.cluster.{{{{ item }}}}"
        tasks_from: published
      loop: [image_security, interconnect, ssh_hardening, gpu_monitoring]

    - name: Load validate's defaults
      ansible.builtin.include_vars:
        file: {defaults}

    - name: Show them
      ansible.builtin.debug:
        msg: "RESOLVED {{{{ {{{names}}} | to_json }}}} RESOLVED"
"""


def resolve(tmp_path, **inventory):
    play = tmp_path / "play.yml"
    names = ", ".join("'%s': %s" % (name, name) for name in VALIDATED + ["gpu_monitoring_published"])
    play.write_text(PLAYBOOK.format(defaults=os.path.join(ROOT, "roles", "validate", "defaults", "main.yml"),
                                    names=names))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCALHOST_WARNING="false")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(play),
                           "-e", json.dumps(dict(inventory, ansible_python_interpreter=sys.executable))],
                          cwd=ROOT, env=env, capture_output=True, check=False, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    text = out.split("RESOLVED ")[1].split(" RESOLVED")[0]
    return json.loads(text.encode().decode("unicode_escape"))


def test_the_owners_defaults_reach_validate(tmp_path):
    resolved = resolve(tmp_path, gpufleet_image="registry.example:5000/train:cpu")
    assert resolved["validate_image"] == "registry.example:5000/train:cpu"
    assert resolved["validate_image_key"] == ""
    assert resolved["validate_image_record"] == "/var/lib/gpufleet/image_security.json"
    assert resolved["validate_launcher"] == "/usr/local/bin/gpufleet-run-image"
    assert resolved["validate_fabric_env"] == "/etc/gpufleet/fabric.env"
    assert resolved["validate_mpi_hostfile"] == "/etc/gpufleet/hostfile"
    assert resolved["validate_gpudirect_preference"] == "auto"
    assert resolved["validate_ssh_port"] == 22 and resolved["validate_node_exporter_port"] == 9100
    assert resolved["validate_textfile_dir"] == "/var/lib/prometheus/node-exporter"
    assert resolved["validate_image_require_tag_annotation"] is True
    assert resolved["gpu_monitoring_published"]["scheme"] == "http"
    assert resolved["gpu_monitoring_published"]["scrape_auth"] is False


def test_the_owners_settings_reach_validate(tmp_path):
    key = tmp_path / "fleet.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    resolved = resolve(
        tmp_path, image_security_image="registry.example:5000/train:gpu", image_security_cosign_public_key_file=str(key),
        image_security_registry_username="puller", image_security_registry_password="s3cret",
        image_security_launcher_path="/opt/gpufleet/run", image_security_ignore_tlog=True,
        interconnect_hostfile_path="/etc/mpi/hosts", interconnect_peermem=False, ssh_hardening_port=2222,
        gpu_monitoring_node_exporter_port=9200, gpu_monitoring_web_tls_cert="-----BEGIN CERTIFICATE-----",
        gpu_monitoring_web_basic_auth_users={"prometheus": "$2y$hash"}, gpu_monitoring_scrape_password="pw")
    assert resolved["validate_image"] == "registry.example:5000/train:gpu"
    assert resolved["validate_image_key"].startswith("-----BEGIN PUBLIC KEY-----")
    assert (resolved["validate_registry_username"], resolved["validate_registry_password"]) == ("puller", "s3cret")
    assert resolved["validate_launcher"] == "/opt/gpufleet/run" and resolved["validate_image_ignore_tlog"] is True
    assert resolved["validate_mpi_hostfile"] == "/etc/mpi/hosts"
    assert resolved["validate_gpudirect_preference"] == "none"  # interconnect_peermem false, deprecated
    assert resolved["validate_ssh_port"] == 2222 and resolved["validate_node_exporter_port"] == 9200
    published = resolved["gpu_monitoring_published"]
    assert (published["scheme"], published["scrape_username"], published["scrape_auth"]) == ("https", "prometheus", True)


def test_validate_reads_no_other_roles_variables():
    with open(os.path.join(ROOT, "roles", "validate", "defaults", "main.yml")) as handle:
        defaults = handle.read()
    others = ("image_security_", "interconnect_", "gpu_monitoring_", "ssh_hardening_", "cluster_ssh_", "fail2ban_",
              "os_hardening_", "nvidia_driver_", "container_runtime_")
    tasks_dir = os.path.join(ROOT, "roles", "validate", "tasks")
    for text in [defaults] + [open(os.path.join(tasks_dir, name)).read() for name in sorted(os.listdir(tasks_dir))]:
        for line in text.splitlines():
            code = line.split("#")[0]
            for prefix in others:
                for word in code.replace("{", " ").replace("(", " ").replace(".", " . ").split():
                    if word.startswith(prefix):
                        assert word.endswith("_published") or word.startswith(prefix.rstrip("_") + "_published"), line
