"""container_runtime without running it: every variable documented with its default, and the daemon.json review
filter on its own (tests/integration/test_container_runtime_daemon_json.py runs the merge with ansible-playbook)."""
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "container_runtime")
TLS = {"tlsverify": True, "tlscacert": "/etc/docker/ca.pem", "tlscert": "/etc/docker/cert.pem",
       "tlskey": "/etc/docker/key.pem"}


def load_yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_every_variable_is_documented_with_its_default():
    defaults = load_yaml("defaults", "main.yml")
    specs = load_yaml("meta", "argument_specs.yml")["argument_specs"]
    main = specs["main"]["options"]
    assert set(defaults) == set(main)
    for name, option in main.items():
        assert option.get("type") and option.get("description"), name
        if "{{" not in str(defaults[name]):
            assert option["default"] == defaults[name], name
    for name, option in specs["daemon_json"]["options"].items():
        if name != "container_runtime_daemon_json_overlay":
            assert option == main[name], name
    assert defaults["container_runtime_default_shm_size"] == "8G"
    # The shared setting, which the training image launcher's memlock defaults to as well: -1.
    assert defaults["container_runtime_ulimit_memlock"] == "{{ gpufleet_container_memlock }}"
    with open(os.path.join(ROOT, "roles", "gpufleet_defaults", "defaults", "main.yml")) as handle:
        assert yaml.safe_load(handle)["gpufleet_container_memlock"] == -1
    assert defaults["container_runtime_ulimit_stack"] == 67108864
    assert defaults["container_runtime_no_new_privileges"] is True


def test_review_filter_on_its_own():
    from ansible_collections.gpufleet.cluster.plugins.filter import docker_daemon
    review = docker_daemon.daemon_json_review
    assert review({}) == {"unsafe_hosts": [], "insecure_registries": [], "tls_complete": False}
    assert review({"hosts": ["fd://", "unix:///run/docker.sock"]})["unsafe_hosts"] == []
    assert review({"hosts": ["tcp://0.0.0.0:2375"]})["unsafe_hosts"] == ["tcp://0.0.0.0:2375"]
    assert review({"hosts": ["tcp://0.0.0.0:2376"], **TLS}) == {
        "unsafe_hosts": [], "insecure_registries": [], "tls_complete": True}
    # "tlsverify": "true" (a string) is not JSON true, and Docker would not read it as such either.
    assert review({"hosts": ["tcp://h:2376"], **dict(TLS, tlsverify="true")})["unsafe_hosts"] == ["tcp://h:2376"]
    assert review({"insecure-registries": "r.example:5000"})["insecure_registries"] == ["r.example:5000"]
    with pytest.raises(ValueError):
        review(["not", "an", "object"])


def test_proc_limits_of_a_node_container_and_of_a_host():
    from conftest import fixture_parts
    from ansible_collections.gpufleet.cluster.plugins.filter.docker_daemon import proc_limits
    container = proc_limits(fixture_parts("proc-limits", "pid1-trixie-node-container.txt")[1])
    assert container["locked memory"] == {"soft": "8388608", "hard": "8388608", "units": "bytes"}
    assert container["stack size"] == {"soft": "8388608", "hard": "unlimited", "units": "bytes"}
    assert container["nice priority"] == {"soft": "0", "hard": "0", "units": ""}
    assert len(container) == 16
    host = proc_limits(fixture_parts("proc-limits", "pid1-vm-host.txt")[1])
    assert host["locked memory"]["hard"] == "unlimited"
    assert host["core file size"] == {"soft": "0", "hard": "unlimited", "units": "bytes"}
    with pytest.raises(ValueError, match="no 'Max"):
        proc_limits("Limit  Soft Limit  Hard Limit  Units\n")


def test_the_limits_check_reads_pid1_through_slurp_and_the_filter():
    tasks = load_yaml("tasks", "main.yml")
    read = next(t for t in tasks if t["name"] == "Read the resource limits Docker itself runs under")
    assert read["ansible.builtin.slurp"] == {"src": "/proc/1/limits"}
    check = next(t for t in tasks if t["name"] == "Stop when Docker here cannot give containers the requested limits")
    assert "gpufleet.cluster.proc_limits" in check["vars"]["__container_runtime_limits"]
