"""gpufleet.cluster.nvidia_container_toolkit run for real with ansible-playbook against a daemon.json in a
temporary directory: GPU gating, the nvidia runtime merged through container_runtime's daemon.json merge,
input checks. Docker and the package manager are not touched (manage_service and install_packages false);
the package tasks are checked for the pinned versions they would install."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
VALIDATE = sys.executable + " -c 'import json,sys; json.load(open(sys.argv[1]))' %s"

PLAYBOOK = """
- name: Run the toolkit role
  hosts: localhost
  gather_facts: false
  vars:
    gpufleet_node:
      gpu_count: {gpus}
      os: {{id: debian, major: "13", family: Debian, codename: trixie}}
  tasks:
    - name: Run the nvidia_container_toolkit role
      ansible.builtin.include_role:
        name: gpufleet.cluster.nvidia_container_toolkit
"""


def run_role(tmp_path, gpus, *flags, **role_vars):
    path = tmp_path / "docker" / "daemon.json"
    runtime = tmp_path / "nvidia-container-runtime"
    if not runtime.exists():
        runtime.write_text("#!/bin/sh\nexec runc \"$@\"\n")
        runtime.chmod(0o755)
    extra = {
        "container_runtime_daemon_json_path": str(path),
        "container_runtime_daemon_json_validate": VALIDATE,
        "container_runtime_manage_service": False,
        "nvidia_container_toolkit_install_packages": False,
        "nvidia_container_toolkit_runtime_path": str(runtime),
        "nvidia_container_toolkit_cdi": False,
        # The udev rule and /dev/char links are the host's: molecule/nvidia_container_toolkit checks them.
        "nvidia_container_toolkit_dev_char_links": False,
        "ansible_python_interpreter": sys.executable,
    }
    extra.update(role_vars)
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK.format(gpus=gpus))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_INVENTORY="localhost,", ANSIBLE_LOCALHOST_WARNING="false")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(play),
                           "-e", json.dumps(extra)] + list(flags),
                          cwd=ROOT, env=env, capture_output=True, check=False, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    changed = None
    for line in out.splitlines():
        if line.startswith("localhost") and "changed=" in line:
            changed = int(line.split("changed=")[1].split()[0])
    return proc.returncode, out.replace("\n", " "), changed, path, str(runtime)


FOREIGN = {"registry-mirrors": ["https://mirror.example.internal"], "data-root": "/srv/docker",
           "default-shm-size": "8G", "log-opts": {"max-size": "100m"}}


def write(path, data):
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))


def test_gpu_less_node_is_left_alone(tmp_path):
    write(tmp_path / "docker" / "daemon.json", FOREIGN)
    rc, out, changed, path, _unused = run_role(tmp_path, 0)
    assert rc == 0, out
    assert changed == 0, out
    assert "has no NVIDIA GPU" in out and "nvidia_container_toolkit_force" in out
    assert json.loads(path.read_text()) == FOREIGN


def test_gpu_node_gets_nvidia_as_default_runtime_and_keeps_foreign_keys(tmp_path):
    write(tmp_path / "docker" / "daemon.json", FOREIGN)
    rc, out, changed, path, runtime = run_role(tmp_path, 8)
    assert rc == 0, out
    assert changed == 1, out
    assert json.loads(path.read_text()) == {
        **FOREIGN, "runtimes": {"nvidia": {"path": runtime, "args": []}}, "default-runtime": "nvidia"}
    rc, out, changed, _unused, _unused = run_role(tmp_path, 8)
    assert rc == 0 and changed == 0, out


def test_forced_on_gpu_less_node_and_runtime_without_default(tmp_path):
    write(tmp_path / "docker" / "daemon.json", {"runtimes": {"crun": {"path": "/usr/bin/crun"}}})
    rc, out, changed, path, runtime = run_role(tmp_path, 0, nvidia_container_toolkit_force=True,
                                               nvidia_container_toolkit_default_runtime=False)
    assert rc == 0, out
    assert json.loads(path.read_text()) == {
        "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": runtime, "args": []}}}


def test_missing_runtime_binary_stops_before_daemon_json_changes(tmp_path):
    write(tmp_path / "docker" / "daemon.json", FOREIGN)
    rc, out, _unused, path, _unused = run_role(tmp_path, 8,
                                               nvidia_container_toolkit_runtime_path="/nonexistent/nvidia-container-runtime")
    assert rc != 0
    assert "/nonexistent/nvidia-container-runtime is missing" in out
    assert json.loads(path.read_text()) == FOREIGN


@pytest.mark.parametrize("version", ["latest", "1.17", "v1.17.8"])
def test_bad_version_fails_before_any_change(tmp_path, version):
    write(tmp_path / "docker" / "daemon.json", FOREIGN)
    rc, out, _unused, path, _unused = run_role(tmp_path, 8, nvidia_container_toolkit_version=version)
    assert rc != 0
    assert "must be X.Y.Z" in out and "Nothing was changed" in out
    assert json.loads(path.read_text()) == FOREIGN


# A stand-in nvidia-ctk (no toolkit package and no GPU here): `cdi generate --format=yaml` prints spec.yaml next to it,
# anything else fails, so the role's exact call is checked too.
STAND_IN_CTK = """#!/bin/sh
[ "$*" = "cdi generate --format=yaml" ] || { echo "unexpected call: $*" >&2; exit 3; }
[ -e "$(dirname "$0")/fail" ] && { echo "ERROR could not load NVML library" >&2; exit 1; }
cat "$(dirname "$0")/spec.yaml"
"""
SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
"""


def cdi_role(tmp_path, *flags):
    ctk = tmp_path / "ctk" / "nvidia-ctk"
    if not ctk.exists():
        ctk.parent.mkdir()
        ctk.write_text(STAND_IN_CTK)
        ctk.chmod(0o755)
        (ctk.parent / "spec.yaml").write_text(SPEC)
    spec = tmp_path / "cdi" / "nvidia.yaml"
    result = run_role(tmp_path, 1, *flags, nvidia_container_toolkit_cdi=True,
                      nvidia_container_toolkit_ctk_path=str(ctk), nvidia_container_toolkit_cdi_spec=str(spec),
                      nvidia_container_toolkit_configure_docker=False)
    return result[:3] + (spec, ctk.parent)


def test_cdi_spec_is_written_once_and_check_mode_shows_a_change_without_writing(tmp_path):
    rc, out, changed, spec, ctk_dir = cdi_role(tmp_path)
    assert rc == 0 and changed == 1, out
    assert spec.read_text() == SPEC and oct(spec.stat().st_mode & 0o777) == "0o644"
    rc, out, changed, _spec, _dir = cdi_role(tmp_path)
    assert rc == 0 and changed == 0, out
    # The driver changed: nvidia-ctk now prints another spec. Check mode reports it, with the diff, and writes nothing.
    (ctk_dir / "spec.yaml").write_text(SPEC.replace("/dev/nvidia0", "/dev/nvidia1"))
    rc, out, changed, _spec, _dir = cdi_role(tmp_path, "--check", "--diff")
    assert rc == 0 and changed == 1, out
    assert "-    - path: /dev/nvidia0 +    - path: /dev/nvidia1" in out, out  # the diff, its lines joined by run_role
    assert spec.read_text() == SPEC
    rc, out, changed, _spec, _dir = cdi_role(tmp_path)
    assert rc == 0 and changed == 1, out
    assert "/dev/nvidia1" in spec.read_text()


def test_cdi_generation_that_fails_stops_the_run_with_its_message(tmp_path):
    rc, out, changed, spec, ctk_dir = cdi_role(tmp_path)
    assert rc == 0
    (ctk_dir / "fail").write_text("")
    rc, out, changed, _spec, _dir = cdi_role(tmp_path)
    assert rc != 0 and "could not load NVML library" in out, out
    assert spec.read_text() == SPEC
