"""Input that reaches root-owned files or trust lists is refused before any change (plugin_utils/input_policy.py).

First the pure functions: each kind of value, networks, root-equivalent groups. Then each role's first check task,
rendered with its own expressions (tests/unit/role_check.py): the bad value is refused with a message that says what
to write instead and ends with "Nothing was changed", and the role's defaults (or good values) still pass.
"""
import pytest

from ansible_collections.gpufleet.cluster.plugins.filter import input_policy as input_filters
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import input_policy

from role_check import refusal

# The roles' expressions hold regular expressions such as '\s' in YAML strings; Jinja2's lexer warns about them.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# ---- kinds of value ----

KIND_CASES = {
    "user_name": (["aiuser", "gpufleet-admin", "_svc", "a" * 32],
                  ["ALL", "%sudo", "#0", "root ALL", "aiuser\nALL ALL=(ALL) NOPASSWD: ALL", "", "A", "a" * 33, "1user"]),
    "group_name": (["video", "rdma", "render"], ["%admin", "Video", "a b", "", "grp\n"]),
    "absolute_path": (["/", "/etc/gpufleet/fabric.env", "/usr/local/bin/gpufleet-run-image", "/var/lib/x/"],
                      ["etc/x", "/etc/../shadow", "/a/./b", '/x"""', "/a b", "/a:/b", "/a,b", "/a\n", ""]),
    "file_name": (["01-gpufleet.conf", "prod-exporters.json"], ["../x", ".hidden", "a/b", "a b", ""]),
    "path_pattern": (["/var/lib/docker", "/scratch/[^/]+/cache"], ["var/lib", "/a b", '/a"', "/a\n!/"]),
    "command_name": (["gcc", "c++", "clang++"], ["..", ".", "../sbin/sshd", "/usr/bin/gcc", "g cc"]),
    "module_name": (["cramfs", "usb-storage", "nvidia_peermem"], ["x /bin/true", "a\ninstall y", "a.b"]),
    "package_name": (["cosign", "nvidia-driver=550.1", "libnccl2:amd64"], ["a b", "-o", "pkg;rm"]),
    "package_pattern": (["nvidia-", "libcuda", "cuda-.*"], ['x";', "a b", "a\\b", "{x}"]),
    "version": (["1.9.1", "2:1.0~rc1"], ["1.0 ; x", "", "-1"]),
    "url": (["https://mirror.example/debian", "http://10.0.0.5/repo/$basearch/", "file:/srv/mirror"],
            ["ftp://x", "https://x y", "https://x\"", "mirror.example/debian", ""]),
    "host_name": (["registry.example.internal", "prom"], ["a_b.example", "-x", "a..b", "a b"]),
    "image_reference": (["registry.example.internal/ml/pytorch-cuda:v2.7",
                         "registry.lab.gpufleet.test:5000/gpufleet/training:cpu", "gpufleet/training-cpu:current",
                         "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-ubuntu22.04@sha256:" + "a" * 64],
                        ['x"""\nimport os', "Registry/UPPER:1", "a b", "x@sha256:123", ""]),
    "ssh_algorithm": (["curve25519-sha256", "chacha20-poly1305@openssh.com", "mlkem768x25519-sha256"],
                      ["aes256-ctr\nPermitRootLogin yes", "a,b", "A"]),
    "fail2ban_time": (["600", "10m", "1h", "1d", "1w", "1h30m", "2mo", "1y"],
                      ["-1", "0", "0m", "10 m", "10m\nignoreip = 0.0.0.0/0", "forever", "1x", ""]),
    "duration": (["30s", "15d", "1h30m", "500ms"], ["30", "1 h", "-1s"]),
    "tmpfs_size": (["50%", "100%", "1%", "64g", "8G", "1048576"],
                   ["50%,suid,exec", "0", "0%", "101%", "50% ", "size=1g", "64gb", ""]),
    "byte_size": (["8G", "100m", "512"], ["8 G", "-1", "8GB"]),
    "umask": (["027", "0027", "077"], ["27", "0o27", "027; curl x | sh", "999"]),
    "options": (["-n", "-n -e /scratch", "-q"], ['-n"; rm -rf /; "', "$(id)", "-n `id`", "-n\n-x", "-n|x"]),
    "argument": (["--collector.systemd", "--collector.filesystem.mount-points-exclude=^/(dev|proc)($|/)"],
                 ['--a"', "--a b", "--a\\", "--a\n"]),
    "interface_list": (["lo,docker0", "^lo,docker", "=eth0", "10.0.0.0/8"], ["lo docker0", "lo,", "^", "a;b"]),
    "ucx_transports": (["rc,ud,sm,self", "^tcp"], ["rc ud", "rc,", "RC"]),
    "one_line": (["anything at all: '\"$", ""], ["two\nlines", "cr\r", "nul\x00"]),
}


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_each_kind_takes_its_good_values_and_refuses_the_rest(kind):
    good, bad = KIND_CASES[kind]
    assert [value for value in good if input_policy.value_problem(value, kind)] == []
    assert [value for value in bad if not input_policy.value_problem(value, kind)] == []


def test_every_kind_is_tested_and_refuses_a_newline():
    assert sorted(KIND_CASES) == sorted(k for k in input_policy.KINDS if k != "settings")
    for kind in input_policy.KINDS:
        assert input_policy.value_problem("a\nb", kind).startswith("write ")


def test_non_strings_are_refused():
    for value in (None, True, ["a"], {"a": 1}):
        assert input_policy.value_problem(value, "user_name")


def test_settings_dicts_take_plain_names_and_one_line_scalars():
    assert input_policy.value_problem({"btl_tcp_if_include": "10.0.0.0/8", "UCX_TLS": "rc", "x.y": 1, "z": None},
                                      "settings") == ""
    for bad in ({"a\nb": "x"}, {"a b": "x"}, {"x": "1\ny = 2"}, {"x": ["a"]}, {"x": {"y": 1}}, ["x"], "x=1"):
        assert input_policy.value_problem(bad, "settings").startswith("write a dict of NAME: value")


def test_an_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown kind"):
        input_policy.value_problem("x", "no_such_kind")


def test_problems_name_the_setting_show_the_value_and_say_what_to_write():
    problems = input_policy.value_problems({"fail2ban_bantime": "-1", "fail2ban_findtime": "10m\nx = 1",
                                            "fail2ban_bantime_maxtime": "1w"}, "fail2ban_time")
    assert problems == [
        "fail2ban_bantime: '-1' is refused; write a fail2ban duration above zero such as 600, 10m, 1h, 1d or 1w "
        "(units s, m, h, d, w, mo, y; -1, a ban for ever, and 0 are refused)",
        "fail2ban_findtime: '10m\\nx = 1' is refused; write a fail2ban duration above zero such as 600, 10m, 1h, 1d or "
        "1w (units s, m, h, d, w, mo, y; -1, a ban for ever, and 0 are refused)"]
    # A list's items are each checked; optional lets an empty value stand for "not set".
    assert len(input_policy.value_problems({"users": ["aiuser", "ALL", "%g"]}, "user_name")) == 2
    assert input_policy.value_problems({"x": ""}, "absolute_path", optional=True) == []
    assert len(input_policy.value_problems({"x": ""}, "absolute_path")) == 1


# ---- networks ----

@pytest.mark.parametrize("network, problem", [
    ("10.1.2.3/0", "'10.1.2.3/0' has host bits set: write 0.0.0.0/0 for the whole network (4294967296 addresses) "
                   "or 10.1.2.3 for that address alone"),
    ("10.20.0.7/24", "'10.20.0.7/24' has host bits set: write 10.20.0.0/24 for the whole network (256 addresses) or "
                     "10.20.0.7 for that address alone"),
    ("fd00::1/64", "'fd00::1/64' has host bits set: write fd00::/64"),
    ("0.0.0.0/0", "0.0.0.0/0 is wider than /16 (4294967296 addresses): every host in it would be trusted like a "
                  "cluster node; list narrower networks, or name 0.0.0.0/0 in x_wide to trust it as a whole"),
    ("10.0.0.0/15", "10.0.0.0/15 is wider than /16"),
    ("fd00::/47", "fd00::/47 is wider than /48"),
    ("10.0.0.0/255.255.0.0", "'10.0.0.0/255.255.0.0' is not in canonical form: write 10.0.0.0/16"),
    ("FD00::/64", "'FD00::/64' is not in canonical form: write fd00::/64"),
    ("cluster-net", "'cluster-net' is not a CIDR network"),
    ("10.0.0.0/33", "'10.0.0.0/33' is not a CIDR network"),
    (" 10.0.0.0/24", "' 10.0.0.0/24' is not a CIDR network"),
    ("10.0.0.0/24\n", "'10.0.0.0/24\\n' is not a CIDR network"),
    ("", "'' is not a CIDR network"),
    (None, "None is not a CIDR network"),
])
def test_networks_with_host_bits_too_wide_or_malformed_are_refused(network, problem):
    assert input_policy.network_problem(network, wide_setting="x_wide").startswith(problem)


@pytest.mark.parametrize("network", ["10.0.0.0/16", "10.20.0.0/24", "10.20.0.5", "10.20.0.5/32", "fd00:1:2::/48",
                                     "fd00::/64", "fd00::5", "192.0.2.0/24"])
def test_narrow_networks_and_single_addresses_pass(network):
    assert input_policy.network_problem(network) == ""


def test_a_wide_network_passes_only_where_the_opt_in_names_it_exactly():
    assert input_policy.network_problem("10.0.0.0/8", ["10.0.0.0/8"]) == ""
    assert input_policy.network_problem("0.0.0.0/0", ["0.0.0.0/0"]) == ""
    assert input_policy.network_problem("10.0.0.0/8", ["10.0.0.0/9", "10.0.0.0/7"]).startswith("10.0.0.0/8 is wider")
    # Not a trust list: only the form counts.
    assert input_policy.network_problem("10.0.0.0/8", trust=False) == ""
    assert "host bits" in input_policy.network_problem("10.0.0.1/8", trust=False)


def test_network_problems_name_the_setting_and_check_the_opt_in_list_itself():
    problems = input_policy.network_problems(
        {"fail2ban_trusted_networks": ["10.1.2.3/0", "10.9.0.0/16"], "fail2ban_ignoreip_extra": "10.0.0.0/8"},
        ["10.0.0.0/8", "10.5.5.5/8"], "fail2ban_wide_networks")
    assert [p.split(":")[0] for p in problems] == ["fail2ban_trusted_networks", "fail2ban_wide_networks"]
    assert "'10.1.2.3/0' has host bits set" in problems[0] and "'10.5.5.5/8' has host bits set" in problems[1]
    assert input_policy.network_problems({"m": ""}, optional=True) == []
    assert input_policy.network_problems({"m": ""}) != []


def test_checked_network_raises_the_same_message():
    with pytest.raises(ValueError, match="host bits"):
        input_policy.checked_network("10.1.2.3/0")
    assert str(input_policy.checked_network("10.0.0.0/8", ["10.0.0.0/8"])) == "10.0.0.0/8"


# ---- root-equivalent groups ----

def test_root_equivalent_groups_need_the_opt_in_that_names_them():
    assert input_policy.root_group_problems(["video", "render", "rdma"]) == []
    problems = input_policy.root_group_problems(["video", "sudo", "docker", "disk", "lxd"])
    assert problems == [
        "cluster_ssh_groups: sudo is root-equivalent; remove it, or name it in cluster_ssh_root_groups to give the "
        "training user that group on purpose",
        "cluster_ssh_groups: docker is root-equivalent (docker run -v /:/host); remove it, or name it in "
        "cluster_ssh_root_groups to give the training user that group on purpose",
        "cluster_ssh_groups: disk is root-equivalent; remove it, or name it in cluster_ssh_root_groups to give the "
        "training user that group on purpose",
        "cluster_ssh_groups: lxd is root-equivalent; remove it, or name it in cluster_ssh_root_groups to give the "
        "training user that group on purpose"]
    assert input_policy.root_group_problems(["sudo", "docker"], ["sudo", "docker"]) == []


@pytest.mark.parametrize("group", input_policy.ROOT_EQUIVALENT_GROUPS)
def test_every_root_equivalent_group_is_refused_without_opt_in(group):
    assert len(input_policy.root_group_problems([group])) == 1


def test_the_opt_in_list_holds_root_equivalent_groups_only():
    assert input_policy.root_group_problems([], ["docker"]) == []
    assert "'video' is not one of the root-equivalent groups" in input_policy.root_group_problems([], ["video"])[0]


def test_an_existing_account_loses_the_root_equivalent_groups_no_opt_in_names():
    current = ["video", "sudo", "docker", "render", "shadow", "wheel"]
    assert input_policy.training_user_groups(current, ["rdma"]) == ["video", "render", "rdma"]
    assert input_policy.training_user_groups(current, ["rdma"], ["shadow"]) == ["video", "render", "shadow", "rdma"]
    assert input_policy.training_user_groups(current, [], ["docker"]) == ["video", "docker", "render"]
    assert input_policy.training_user_groups([], ["rdma"], ["sudo", "docker"]) == ["rdma", "sudo", "docker"]
    # A root-equivalent group in the ordinary list is never added without its opt-in (the main check refused it).
    assert input_policy.training_user_groups([], ["sudo"]) == []


def test_the_filters_export_the_functions():
    filters = input_filters.FilterModule().filters()
    assert filters["input_problems"]({"u": "ALL"}, "user_name")[0].startswith("u: 'ALL' is refused")
    assert filters["network_problems"]({"n": "10.0.0.0/8"}, wide_networks=["10.0.0.0/8"]) == []
    assert filters["root_group_problems"](["sudo"], None)
    assert filters["training_user_groups"](["sudo", "video"]) == ["video"]
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="unknown kind"):
        filters["input_problems"]({"u": "x"}, "nope")


# ---- each role's first check task ----

CLUSTER_SSH = ("cluster_ssh", "main.yml", "Check the cluster_ssh settings")
SSH_HARDENING = ("ssh_hardening", "main.yml", "Check the ssh_hardening settings")
FAIL2BAN = ("fail2ban", "main.yml", "Check the fail2ban settings")
OS_HARDENING = ("os_hardening", "main.yml", "Check the os_hardening settings")
IMAGE_SECURITY = ("image_security", "main.yml",
                  "Check the image reference, the trust anchor and the scan gate before changing anything")
GPU_MONITORING = ("gpu_monitoring", "check.yml", "Check the monitoring settings")
PROMETHEUS = ("gpu_monitoring", "prometheus_server.yml", "Check the Prometheus server settings")
INTERCONNECT = ("interconnect", "check.yml", "Check the stack source, cluster network and hostfile hosts")
NVIDIA_DRIVER = ("nvidia_driver", "main.yml",
                 "Refuse a driver branch below the supported minimum, or an invalid GPU policy, before anything changes")
CONTAINER_RUNTIME = ("container_runtime", "main.yml", "Check the container runtime settings")
TOOLKIT = ("nvidia_container_toolkit", "main.yml", "Check the container toolkit settings")

# What a role needs set before its defaults pass at all.
NEEDS = {
    "image_security": {"image_security_image": "registry.example.internal/ml/pytorch-cuda:v2.7",
                       "image_security_cosign_public_key": "-----BEGIN PUBLIC KEY-----"},
    "gpu_monitoring": {"ansible_check_mode": True},
}
TASKS = [CLUSTER_SSH, SSH_HARDENING, FAIL2BAN, OS_HARDENING, IMAGE_SECURITY, GPU_MONITORING, PROMETHEUS, INTERCONNECT,
         NVIDIA_DRIVER, CONTAINER_RUNTIME, TOOLKIT]


def refused(task, **settings):
    return refusal(*task, **dict(NEEDS.get(task[0], {}), **settings))


@pytest.mark.parametrize("task", TASKS, ids=lambda task: "%s-%s" % (task[0], task[1]))
def test_the_defaults_pass_every_check(task):
    assert refused(task) == ""


REFUSALS = [
    # 4: root-equivalent groups of the training user.
    (CLUSTER_SSH, {"cluster_ssh_groups": ["sudo"]}, "cluster_ssh_groups: sudo is root-equivalent; remove it, or name "
                                                    "it in cluster_ssh_root_groups"),
    (CLUSTER_SSH, {"cluster_ssh_groups": ["docker"]}, "name it in cluster_ssh_root_groups"),
    (CLUSTER_SSH, {"cluster_ssh_groups": ["lxd", "video"]}, "cluster_ssh_groups: lxd is root-equivalent"),
    (CLUSTER_SSH, {"cluster_ssh_root_groups": ["video"]}, "is not one of the root-equivalent groups"),
    (CLUSTER_SSH, {"cluster_ssh_groups": ["%wheel"]}, "cluster_ssh_groups: '%wheel' is refused; write a plain group"),
    # 5: trusted networks, into the key's from=, sshd, fail2ban and nftables.
    (CLUSTER_SSH, {"gpufleet_trusted_networks": ["10.1.2.3/0"]}, "cluster_ssh_trusted_networks: '10.1.2.3/0' has "
                                                                 "host bits set: write 0.0.0.0/0"),
    (CLUSTER_SSH, {"cluster_ssh_trusted_networks": ["10.0.0.0/8"]}, "name 10.0.0.0/8 in cluster_ssh_wide_networks"),
    (SSH_HARDENING, {"gpufleet_trusted_networks": ["10.1.2.3/0"]}, "ssh_hardening_trusted_networks: '10.1.2.3/0' "
                                                                   "has host bits set"),
    (SSH_HARDENING, {"ssh_hardening_penalty_exempt": ["0.0.0.0/0"]}, "ssh_hardening_penalty_exempt: 0.0.0.0/0 is "
                                                                     "wider than /16"),
    (FAIL2BAN, {"gpufleet_trusted_networks": ["10.1.2.3/0"]}, "fail2ban_trusted_networks: '10.1.2.3/0' has host bits"),
    (FAIL2BAN, {"fail2ban_ignoreip_extra": ["10.0.0.0/8"]}, "name 10.0.0.0/8 in fail2ban_wide_networks"),
    (OS_HARDENING, {"gpufleet_trusted_networks": ["10.1.2.3/0"]}, "os_hardening_trusted_networks: '10.1.2.3/0' has "
                                                                  "host bits"),
    (OS_HARDENING, {"gpufleet_admin_networks": ["0.0.0.0/0"]}, "os_hardening_admin_networks: 0.0.0.0/0 is wider"),
    (OS_HARDENING, {"gpufleet_admin_networks": ["10.0.0.0/24\ntcp dport 22 accept"]},
     "os_hardening_admin_networks: '10.0.0.0/24\\ntcp dport 22 accept' is not a CIDR network"),
    (OS_HARDENING, {"gpufleet_monitoring_network": "10.40.0.9/24"}, "os_hardening_monitoring_network: '10.40.0.9/24' "
                                                                    "has host bits"),
    (GPU_MONITORING, {"gpufleet_monitoring_network": "10.40.0.0/24 "}, "gpu_monitoring_network: '10.40.0.0/24 ' is "
                                                                       "not a CIDR network"),
    # 7: values written raw into files.
    (IMAGE_SECURITY, {"image_security_launcher_users": ["ALL"]}, "image_security_launcher_users: 'ALL' is refused; "
                                                                 "write a plain user name"),
    (IMAGE_SECURITY, {"image_security_launcher_users": ["%sudo"]}, "image_security_launcher_users: '%sudo' is refused"),
    (IMAGE_SECURITY, {"image_security_launcher_users": ["aiuser\nALL ALL=(ALL) NOPASSWD: ALL"]},
     "image_security_launcher_users: 'aiuser\\nALL ALL=(ALL) NOPASSWD: ALL' is refused"),
    (IMAGE_SECURITY, {"image_security_launcher_fabric_env": '/etc/x"""\nimport os'}, "image_security_launcher_fabric_env"),
    (IMAGE_SECURITY, {"image_security_launcher_mounts": [{"src": "/data", "dest": "/data:rw"}]},
     "image_security_launcher_mounts: '/data:rw' is refused"),
    (IMAGE_SECURITY, {"image_security_image": "registry.example/ml/x:v1\nimport os"}, "image_security_image"),
    (FAIL2BAN, {"fail2ban_bantime": "-1"}, "fail2ban_bantime: '-1' is refused; write a fail2ban duration above zero"),
    (FAIL2BAN, {"fail2ban_findtime": "10m\nignoreip = 0.0.0.0/0"}, "fail2ban_findtime: '10m\\nignoreip = 0.0.0.0/0' "
                                                                   "is refused"),
    (FAIL2BAN, {"fail2ban_bantime_maxtime": "-1"}, "fail2ban_bantime_maxtime: '-1' is refused"),
    (OS_HARDENING, {"os_hardening_dev_shm_size": "50%,suid,exec"}, "os_hardening_dev_shm_size: '50%,suid,exec' is "
                                                                   "refused; write a tmpfs size alone"),
    (OS_HARDENING, {"os_hardening_shell_umask": "027; curl x | sh"}, "os_hardening_shell_umask"),
    (OS_HARDENING, {"os_hardening_rootkit_scanner_options": '-n"; id; "'}, "os_hardening_rootkit_scanner_options"),
    (OS_HARDENING, {"os_hardening_compilers": ["gcc", ".."]}, "os_hardening_compilers: '..' is refused"),
    (OS_HARDENING, {"os_hardening_disabled_modules": ["cramfs /bin/true\ninstall x"]}, "os_hardening_disabled_modules"),
    (OS_HARDENING, {"os_hardening_file_integrity_exclude_extra": ["/scratch\n!/etc"]},
     "os_hardening_file_integrity_exclude_extra"),
    (OS_HARDENING, {"os_hardening_unattended_upgrades_blacklist": ['x";\nUnattended-Upgrade::x "y']},
     "os_hardening_unattended_upgrades_blacklist"),
    (OS_HARDENING, {"os_hardening_login_defs_settings": {"UMASK": "027\nPASS_MAX_DAYS 1"}},
     "os_hardening_login_defs_settings"),
    (OS_HARDENING, {"os_hardening_compiler_group": "root wheel"}, "os_hardening_compiler_group"),
    (SSH_HARDENING, {"ssh_hardening_ciphers": ["aes256-ctr\nPermitRootLogin yes"]}, "ssh_hardening_ciphers"),
    (SSH_HARDENING, {"gpufleet_admin_user": "admin\nMatch all"}, "ssh_hardening_admin_user"),
    (CLUSTER_SSH, {"cluster_ssh_shell": "/bin/bash -i"}, "cluster_ssh_shell"),
    (CLUSTER_SSH, {"cluster_ssh_admin_keys": ["ssh-ed25519 AAAA a\nssh-ed25519 BBBB planted"]}, "cluster_ssh_admin_keys"),
    (GPU_MONITORING, {"gpu_monitoring_node_exporter_extra_args": ['--x"\nARGS2="y']},
     "gpu_monitoring_node_exporter_extra_args"),
    (GPU_MONITORING, {"gpu_monitoring_dcgm_exporter_docker_bin": "/usr/bin/docker\nExecStartPre=/bin/sh"},
     "gpu_monitoring_dcgm_exporter_docker_bin"),
    (GPU_MONITORING, {"gpu_monitoring_dcgm_exporter_tag": "x\nExecStartPre=/bin/sh"},
     "gpu_monitoring_dcgm_exporter_registry, _repository, _tag and _digest"),
    (GPU_MONITORING, {"gpu_monitoring_cluster_name": "prod\nrule_files: [/tmp/x]"}, "gpu_monitoring_cluster_name"),
    (PROMETHEUS, {"gpu_monitoring_prometheus_retention": '15d" --web.enable-admin-api "'},
     "gpu_monitoring_prometheus_retention"),
    (INTERCONNECT, {"interconnect_hpcx_dir": '/opt/hpcx"; id; "'}, "interconnect_hpcx_dir"),
    (INTERCONNECT, {"interconnect_mca_params": {"btl": "tcp\nplm_rsh_agent = /tmp/x"}}, "interconnect_mca_params"),
    (INTERCONNECT, {"interconnect_training_user": "* hard"}, "interconnect_training_user"),
    (INTERCONNECT, {"interconnect_ucx_tls": "rc\nUCX_X=1"}, "interconnect_ucx_tls"),
    (NVIDIA_DRIVER, {"nvidia_driver_mok_key_path": '/var/lib/x"; id; "'}, "nvidia_driver_mok_key_path"),
    (NVIDIA_DRIVER, {"nvidia_driver_packages_extra": ["a b"]}, "nvidia_driver_packages_extra"),
    (CONTAINER_RUNTIME, {"container_runtime_daemon_json_path": "/etc/docker/../x"}, "container_runtime_daemon_json_path"),
    (TOOLKIT, {"nvidia_container_toolkit_cdi_spec": "/etc/cdi/nvidia yaml"}, "nvidia_container_toolkit_cdi_spec"),
]


@pytest.mark.parametrize("task, settings, expected", REFUSALS,
                         ids=["%s-%s" % (task[0], sorted(settings)[0]) for task, settings, _unused in REFUSALS])
def test_a_bad_value_is_refused_by_the_roles_first_check_with_what_to_write(task, settings, expected):
    message = refused(task, **settings)
    assert expected in message
    assert "Nothing was changed" in message


GOOD = [
    (CLUSTER_SSH, {"cluster_ssh_groups": ["video", "render"]}),
    (CLUSTER_SSH, {"cluster_ssh_groups": ["sudo"], "cluster_ssh_root_groups": ["sudo"]}),
    (CLUSTER_SSH, {"cluster_ssh_groups": ["docker"], "cluster_ssh_root_groups": ["docker"]}),
    (CLUSTER_SSH, {"cluster_ssh_trusted_networks": ["10.0.0.0/8"], "gpufleet_wide_networks": ["10.0.0.0/8"]}),
    (FAIL2BAN, {"fail2ban_bantime": "1h", "fail2ban_findtime": "600", "fail2ban_bantime_maxtime": "4w",
                "gpufleet_trusted_networks": ["10.50.0.0/24"], "fail2ban_ignoreip_extra": ["192.0.2.10"]}),
    (FAIL2BAN, {"fail2ban_trusted_networks": ["10.0.0.0/8"], "fail2ban_wide_networks": ["10.0.0.0/8"]}),
    (OS_HARDENING, {"os_hardening_dev_shm_size": "64g", "gpufleet_admin_networks": ["10.0.0.0/24", "2001:db8::/64"],
                    "gpufleet_monitoring_network": "10.40.0.0/24", "os_hardening_shell_umask": ""}),
    (SSH_HARDENING, {"ssh_hardening_penalty_exempt": ["192.0.2.0/24"], "ssh_hardening_trusted_networks": ["10.0.0.0/8"],
                     "ssh_hardening_wide_networks": ["10.0.0.0/8"]}),
    (IMAGE_SECURITY, {"image_security_launcher_users": ["aiuser", "researcher"], "image_security_launcher_fabric_env": ""}),
    (GPU_MONITORING, {"gpufleet_monitoring_network": "10.40.0.0/24",
                      "gpu_monitoring_node_exporter_extra_args": ["--collector.systemd"]}),
    (INTERCONNECT, {"interconnect_mca_params": {"btl_tcp_if_include": "10.0.0.0/8"}, "interconnect_nccl_socket_ifname": "=ib0"}),
]


@pytest.mark.parametrize("task, settings", GOOD, ids=["%s-%d" % (task[0], n) for n, (task, _unused) in enumerate(GOOD)])
def test_good_values_still_pass(task, settings):
    assert refused(task, **settings) == ""
