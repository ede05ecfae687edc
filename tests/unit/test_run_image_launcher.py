"""image_security's training image launcher (gpufleet-run-image), rendered as the role renders it and run with
a stand-in for the filesystem, so the GPU/InfiniBand branches a container node cannot reach are checked too."""
import importlib.util
import json
import os

import jinja2
import pytest
import yaml

from ansible.plugins.filter.core import comment

from conftest import ROOT

TEMPLATE = os.path.join(ROOT, "roles", "image_security", "templates")
PINNED = "registry.example:5000/ml/train@sha256:" + "ab" * 32


FABRIC_ENV = "/etc/gpufleet/fabric.env"
HOSTFILE = "/etc/gpufleet/hostfile"
PLACEMENT = "/etc/gpufleet/placement.json"


def launcher(tmp_path, engine="/usr/bin/docker", memlock=-1, fabric_env=FABRIC_ENV, hostfile=HOSTFILE,
             placement=PLACEMENT, max_cpus=0, max_memory_gib=0, mounts=None):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    env.filters["to_json"] = json.dumps
    text = env.get_template("gpufleet-run-image.j2").render(
        ansible_managed="Ansible managed", __image_security_launcher_image=PINNED,
        __image_security_launcher_engine=engine, image_security_launcher_memlock=memlock,
        image_security_launcher_mounts=mounts if mounts is not None else [
            {"src": "/usr/local/lib/gpufleet/validate", "dest": "/opt/gpufleet/validate"}],
        image_security_launcher_path="/usr/local/bin/gpufleet-run-image",
        image_security_launcher_fabric_env=fabric_env, image_security_launcher_hostfile=hostfile,
        image_security_launcher_placement=placement, image_security_launcher_max_cpus=max_cpus,
        image_security_launcher_max_memory_gib=max_memory_gib,
        __image_security_launcher_sudoers="/etc/sudoers.d/gpufleet-run-image")
    path = tmp_path / "gpufleet-run-image.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("gpufleet_run_image", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def only(paths):
    return lambda path: path in paths


def test_cpu_node_gets_host_namespaces_its_own_uid_and_the_pinned_digest(tmp_path):
    mod = launcher(tmp_path)
    args = mod.engine_args(["torchrun", "--standalone", "x.py"], environ={"PATH": "/bin", "NCCL_DEBUG": "INFO",
                                                                          "SECRET_TOKEN": "x"},
                           exists=only({"/usr/local/lib/gpufleet/validate"}))
    assert args[:2] == ["/usr/bin/docker", "run"]
    assert args[-4:] == [PINNED, "torchrun", "--standalone", "x.py"]
    joined = " ".join(args)
    for expected in ("--pull never", "--network host", "--ipc host", "--security-opt no-new-privileges",
                     "--ulimit memlock=-1:-1", "--user %d:%d" % (os.getuid(), os.getgid()),
                     "-v /usr/local/lib/gpufleet/validate:/opt/gpufleet/validate:ro", "-e NCCL_DEBUG"):
        assert expected in joined
    # Nothing a GPU-less node does not have, no caller variable outside the training prefixes, no privileges.
    for absent in ("--gpus", "/dev/infiniband", "IPC_LOCK", "SECRET_TOKEN", "--privileged", ".ssh", "-v /:"):
        assert absent not in joined


def test_the_default_mounts_hand_on_nccls_topology_file_where_the_node_has_one(tmp_path):
    """NCCL reads /var/run/nvidia-topologyd/virtualTopology.xml before it probes (cloud VMs whose hypervisor hides the
    PCI tree ship it); the role's default mounts give a container that directory where the node has it."""
    with open(os.path.join(ROOT, "roles", "image_security", "defaults", "main.yml")) as handle:
        mounts = yaml.safe_load(handle)["image_security_launcher_mounts"]
    mod = launcher(tmp_path, mounts=mounts)
    joined = " ".join(mod.engine_args(["true"], environ={}, exists=only({"/run/nvidia-topologyd"})))
    assert "-v /run/nvidia-topologyd:/var/run/nvidia-topologyd:ro" in joined
    assert "nvidia-topologyd" not in " ".join(mod.engine_args(["true"], environ={}, exists=only(set())))


def test_gpu_and_infiniband_node_gets_gpus_hcas_ipc_lock_and_the_fabric_settings(tmp_path):
    mod = launcher(tmp_path, memlock=8388608)
    args = mod.engine_args(["nvidia-smi", "-L"], environ={},
                           exists=only({"/dev/nvidiactl", "/dev/infiniband", "/etc/nccl.conf", "/etc/ucx/ucx.conf",
                                        "/etc/openmpi/openmpi-mca-params.conf"}))
    joined = " ".join(args)
    for expected in ("--gpus all", "--device /dev/infiniband", "--cap-add IPC_LOCK",
                     "-v /etc/nccl.conf:/etc/nccl.conf:ro", "-v /etc/ucx/ucx.conf:/etc/ucx/ucx.conf:ro",
                     "-v /etc/openmpi/openmpi-mca-params.conf:/etc/openmpi/openmpi-mca-params.conf:ro",
                     "--ulimit memlock=8388608:8388608"):
        assert expected in joined


def test_the_cluster_hostfile_is_handed_read_only_at_its_path_only_where_it_is_set(tmp_path):
    args = " ".join(launcher(tmp_path).engine_args(["mpirun"], environ={}, exists=only({HOSTFILE})))
    assert "-v /etc/gpufleet/hostfile:/etc/gpufleet/hostfile:ro" in args
    assert "hostfile" not in " ".join(launcher(tmp_path).engine_args(["mpirun"], environ={}, exists=only(set())))
    unset = launcher(tmp_path, hostfile="")
    assert "hostfile" not in " ".join(unset.engine_args(["mpirun"], environ={}, exists=only({HOSTFILE})))


def test_the_placement_map_is_handed_read_only_at_its_path_only_where_it_is_set(tmp_path):
    args = " ".join(launcher(tmp_path).engine_args(["torchrun"], environ={}, exists=only({PLACEMENT})))
    assert "-v /etc/gpufleet/placement.json:/etc/gpufleet/placement.json:ro" in args
    assert "placement" not in " ".join(launcher(tmp_path).engine_args(["torchrun"], environ={}, exists=only(set())))
    unset = launcher(tmp_path, placement="")
    assert "placement" not in " ".join(unset.engine_args(["torchrun"], environ={}, exists=only({PLACEMENT})))


def test_podman_reaches_gpus_through_cdi(tmp_path):
    mod = launcher(tmp_path, engine="/usr/bin/podman")
    args = mod.engine_args(["nvidia-smi"], environ={}, exists=only({"/dev/nvidiactl"}))
    assert "--gpus" not in args
    assert args[args.index("--device") + 1] == "nvidia.com/gpu=all"


COPY = "/run/gpufleet-run-image/ssh.4242.1234." + "0" * 16


def test_ssh_mounts_only_with_the_option(tmp_path):
    mod = launcher(tmp_path)
    home = os.path.expanduser("~")
    everything = {os.path.join(home, ".ssh"), "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_config.d"}
    copy = (COPY, os.path.join(home, ".ssh"))
    assert ".ssh" not in " ".join(mod.engine_args(["mpirun"], environ={}, exists=only(everything), ssh_copy=copy))
    joined = " ".join(mod.engine_args(["mpirun"], ssh=True, name="v", environ={}, exists=only(everything),
                                      ssh_copy=copy))
    # The root-owned copy of ~/.ssh, at the caller's ~/.ssh in the container.
    assert "-v %s:%s/.ssh:ro" % (COPY, home) in joined
    assert "-v /etc/ssh/ssh_known_hosts:/etc/ssh/ssh_known_hosts:ro" in joined
    assert "--name v" in joined


def test_ssh_never_hands_the_engine_the_callers_own_directory(tmp_path):
    # The caller could swap ~/.ssh for a link to /root/.ssh between any check and the engine's mount: the engine
    # gets the copy only root can change, or nothing (make_ssh_copy's tests attack the copy).
    mod = launcher(tmp_path)
    home = os.path.expanduser("~")
    args = mod.engine_args(["mpirun"], ssh=True, environ={}, exists=lambda path: True)
    assert "/.ssh:" not in " ".join(args)
    args = mod.engine_args(["mpirun"], ssh=True, environ={}, exists=lambda path: True,
                           ssh_copy=(COPY, os.path.join(home, ".ssh")))
    sources = [args[i + 1].split(":")[0] for i, arg in enumerate(args) if arg == "-v"]
    assert not [source for source in sources if source.startswith(home)]


@pytest.mark.parametrize("argv, code", [([], 2), (["--bogus", "x"], 2), (["--ssh"], 2)])
def test_bad_usage_says_so(tmp_path, capsys, argv, code):
    mod = launcher(tmp_path)
    assert mod.main(list(argv), euid=0) == code
    assert "gpufleet-run-image:" in capsys.readouterr().err


def test_print_image(tmp_path, capsys):
    mod = launcher(tmp_path)
    assert mod.main(["--print-image"]) == 0
    assert capsys.readouterr().out.strip() == PINNED


def test_root_started_by_sudo_runs_the_container_as_the_sudo_caller(tmp_path):
    mod = launcher(tmp_path)
    assert mod.caller({"SUDO_UID": "1000", "SUDO_GID": "1000"}, euid=0) == (1000, 1000)
    # Only root reads SUDO_UID: a user who sets it gets their own uid.
    assert mod.caller({"SUDO_UID": "0", "SUDO_GID": "0"}, euid=1000) == (os.getuid(), os.getgid())
    args = mod.engine_args(["id", "-u"], environ={"SUDO_UID": "1000", "SUDO_GID": "1001"}, exists=only(set()),
                           identity=mod.caller({"SUDO_UID": "1000", "SUDO_GID": "1001"}, euid=0))
    assert args[args.index("--user") + 1] == "1000:1001"


def test_a_user_outside_the_docker_group_goes_through_the_sudoers_rule(tmp_path):
    mod = launcher(tmp_path)
    calls = []
    mod.main(["--name", "x", "--", "id"], euid=1000, execv=lambda path, argv: calls.append(argv),
             execve=lambda *a: calls.append("engine started without sudo"))
    assert calls[0] == ["/usr/bin/sudo", "-n", "/usr/local/bin/gpufleet-run-image", "--name", "x", "--", "id"]


@pytest.mark.parametrize("argv", [["--privileged", "--", "id"], ["--image", "busybox", "--", "id"],
                                  ["-v", "/:/host", "--", "id"], ["--name", "x --privileged", "--", "id"],
                                  ["--name", "-v", "--", "id"]])
def test_no_engine_option_image_or_mount_can_be_added(tmp_path, argv):
    mod = launcher(tmp_path)
    started = []
    assert mod.main(list(argv), euid=0, execve=lambda *a: started.append(a)) == 2
    assert started == []


def test_the_engine_gets_a_clean_environment(tmp_path):
    mod = launcher(tmp_path)
    env = mod.engine_environment({"DOCKER_HOST": "tcp://evil.example:2375", "DOCKER_CONFIG": "/tmp/x",
                                  "LD_PRELOAD": "/tmp/x.so", "NCCL_DEBUG": "INFO", "PATH": "/tmp/bin"})
    assert env == {"NCCL_DEBUG": "INFO", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def test_the_command_goes_after_the_image(tmp_path):
    mod = launcher(tmp_path)
    started = []
    mod.main(["--", "--privileged", "-v", "/:/host"], euid=0, execve=lambda path, argv, env: started.append(argv))
    argv = started[0]
    assert argv[argv.index(PINNED) + 1:] == ["--privileged", "-v", "/:/host"]
    assert "--privileged" not in argv[:argv.index(PINNED)]


def file_stat(owner=0, mode=0o644, kind=None):
    """os.stat stand-in: a file of the given owner and mode (a regular file unless KIND is another S_IF*)."""
    import stat
    result = os.stat_result(((stat.S_IFREG if kind is None else kind) | mode, 0, 0, 1, owner, owner, 0, 0, 0, 0))
    return lambda path: result


def test_the_nodes_fabric_env_file_is_passed_where_it_exists(tmp_path):
    mod = launcher(tmp_path)
    args = mod.engine_args(["env"], environ={}, exists=only({FABRIC_ENV, "/etc/nccl.conf"}), stat_path=file_stat())
    assert args[args.index("--env-file") + 1] == FABRIC_ENV
    assert args.index("--env-file") < args.index(PINNED)
    # The settings files stay mounted read-only beside it.
    assert "/etc/nccl.conf:/etc/nccl.conf:ro" in args
    assert "--env-file" not in mod.engine_args(["env"], environ={}, exists=only({"/etc/nccl.conf"}),
                                               stat_path=file_stat())


@pytest.mark.parametrize("stat_path", [file_stat(owner=1000), file_stat(mode=0o666), file_stat(mode=0o664),
                                       file_stat(kind=0o040000)])
def test_a_fabric_env_file_others_could_write_is_not_passed(tmp_path, stat_path):
    # Owned by a user, group- or world-writable, or a directory: the engine reads it as root for every user's
    # container, so none of these is handed on.
    mod = launcher(tmp_path)
    assert "--env-file" not in mod.engine_args(["env"], environ={}, exists=only({FABRIC_ENV}), stat_path=stat_path)


def test_no_fabric_env_file_when_the_variable_is_empty(tmp_path):
    mod = launcher(tmp_path, fabric_env="")
    assert "--env-file" not in mod.engine_args(["env"], environ={}, exists=lambda path: True, stat_path=file_stat())


@pytest.mark.parametrize("engine", ["/usr/bin/docker", "/usr/bin/podman"])
def test_the_callers_variables_come_after_the_fabric_env_file(tmp_path, engine):
    # Docker and Podman both apply --env-file first and -e over it, whatever the order on the command line;
    # the argv keeps that order as well, so the caller's NCCL_SOCKET_IFNAME wins over the node's.
    mod = launcher(tmp_path, engine=engine)
    environ = {"NCCL_SOCKET_IFNAME": "lo", "UCX_TLS": "tcp", "PATH": "/bin"}
    args = mod.engine_args(["env"], environ=environ, exists=only({FABRIC_ENV}), stat_path=file_stat())
    env_file = args.index("--env-file")
    passed = [i for i, arg in enumerate(args) if arg == "-e"]
    assert [args[i + 1] for i in passed] == ["NCCL_SOCKET_IFNAME", "UCX_TLS"]
    assert env_file < min(passed) and max(passed) < args.index(PINNED)
    # The values reach the engine through its environment, read by -e KEY.
    assert mod.engine_environment(environ)["NCCL_SOCKET_IFNAME"] == "lo"


def test_the_docstring_says_what_the_container_gets(tmp_path):
    doc = launcher(tmp_path).__doc__
    for words in (FABRIC_ENV, "--env-file", "/etc/nccl.conf", "/etc/ucx/ucx.conf", "win over"):
        assert words in doc


# --gpus, --cpus, --memory: the placement map of a two-socket 8-GPU node (what placement_facts writes).
EIGHT = {"version": 1, "numa_nodes": [{"node": 0, "cpus": "0-47"}, {"node": 1, "cpus": "48-95"}], "cpus": "0-95",
         "gpus": [{"index": i, "uuid": "GPU-%d" % i, "numa_node": 0 if i < 4 else 1,
                   "cpus": "0-47" if i < 4 else "48-95", "nearest_hcas": [], "nvlink_peers": []} for i in range(8)],
         "hcas": []}


def test_chosen_gpus_are_handed_by_index_with_their_cpus_and_memory_nodes(tmp_path):
    mod = launcher(tmp_path)
    limits = mod.job_limits(gpus="GPU-5,4", placement=EIGHT, max_cpus=96, max_memory_gib=1024)
    assert limits == {"gpus": [4, 5], "cpuset-cpus": ",".join(str(c) for c in range(48, 96)), "cpuset-mems": "1"}
    args = mod.engine_args(["torchrun"], environ={}, exists=only({"/dev/nvidiactl"}), limits=limits)
    assert args[args.index("--gpus") + 1] == '"device=4,5"'
    assert args[args.index("--cpuset-mems") + 1] == "1"
    both = mod.job_limits(gpus="3,4", placement=EIGHT, max_cpus=96, max_memory_gib=1024)
    assert both["cpuset-mems"] == "0,1" and both["cpuset-cpus"] == ",".join(str(c) for c in range(96))


def test_podman_gets_one_cdi_device_per_chosen_gpu(tmp_path):
    mod = launcher(tmp_path, engine="/usr/bin/podman")
    limits = mod.job_limits(gpus="0,2", placement=EIGHT, max_cpus=96, max_memory_gib=1024)
    args = " ".join(mod.engine_args(["x"], environ={}, exists=only({"/dev/nvidiactl"}), limits=limits))
    assert "--device nvidia.com/gpu=0 --device nvidia.com/gpu=2" in args and "gpu=all" not in args


def test_without_options_every_gpu_and_no_limit(tmp_path):
    mod = launcher(tmp_path)
    limits = mod.job_limits(placement=EIGHT, max_cpus=96, max_memory_gib=1024)
    args = mod.engine_args(["x"], environ={}, exists=only({"/dev/nvidiactl"}), limits=limits)
    assert args[args.index("--gpus") + 1] == "all"
    assert not {"--cpus", "--memory", "--cpuset-cpus", "--cpuset-mems"} & set(args)
    assert mod.job_limits(gpus="all", placement=EIGHT, max_cpus=96, max_memory_gib=1024)["gpus"] is None


def test_cpus_and_memory_are_whole_numbers_within_the_maxima(tmp_path):
    mod = launcher(tmp_path, max_cpus=16, max_memory_gib=64)
    limits = mod.job_limits(cpus="16", memory="64g")
    args = mod.engine_args(["x"], environ={}, exists=only(set()), limits=limits)
    assert args[args.index("--cpus") + 1] == "16" and args[args.index("--memory") + 1] == "64g"
    assert "--gpus" not in args  # no GPU on this node
    assert mod.job_limits(memory="8")["memory"] == "8g"


@pytest.mark.parametrize("asked, words", [
    ({"cpus": "17"}, "--cpus takes a whole number from 1 to 16"),
    ({"cpus": "0"}, "--cpus takes a whole number"),
    ({"cpus": "1.5"}, "--cpus takes a whole number"),
    ({"cpus": "-1"}, "--cpus takes a whole number"),
    ({"cpus": "08"}, "--cpus takes a whole number"),
    ({"memory": "65g"}, "--memory takes a whole number of GiB from 1 to 64"),
    ({"memory": "1t"}, "--memory takes a whole number"),
    ({"memory": "512m"}, "--memory takes a whole number"),
    ({"memory": ""}, "--memory takes a whole number"),
    ({"gpus": "8"}, "'8' is not a GPU index or UUID"),
    ({"gpus": "0,0"}, "names GPU 0 twice"),
    ({"gpus": "GPU-1,1"}, "names GPU 1 twice"),
    ({"gpus": "0,"}, "'' is not a GPU index or UUID"),
    ({"gpus": " 1"}, "' 1' is not a GPU index or UUID"),
])
def test_values_the_options_do_not_take_are_refused(tmp_path, asked, words):
    mod = launcher(tmp_path, max_cpus=16, max_memory_gib=64)
    with pytest.raises(ValueError) as error:
        mod.job_limits(placement=EIGHT, **asked)
    assert words in str(error.value)


def test_gpus_are_refused_where_the_map_lists_none_or_cannot_be_read(tmp_path):
    mod = launcher(tmp_path)
    cpu_only = {"numa_nodes": [{"node": 0, "cpus": "0-1"}], "gpus": []}
    for placement in (cpu_only, None):
        with pytest.raises(ValueError) as error:
            mod.job_limits(gpus="0", placement=placement)
        assert "lists no GPU, so none can be chosen" in str(error.value)


def test_main_refuses_a_bad_value_and_an_option_given_twice_before_any_engine_runs(tmp_path, capsys):
    mod = launcher(tmp_path, max_cpus=4)
    ran = []
    assert mod.main(["--cpus", "5", "--", "true"], euid=0, execve=lambda *a: ran.append(a)) == 2
    assert "--cpus takes a whole number from 1 to 4" in capsys.readouterr().err
    assert mod.main(["--cpus", "1", "--cpus", "2", "--", "true"], euid=0, execve=lambda *a: ran.append(a)) == 2
    assert mod.main(["--memory"], euid=0, execve=lambda *a: ran.append(a)) == 2
    assert ran == []
