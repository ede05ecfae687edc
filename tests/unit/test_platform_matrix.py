"""Every OS the README claims x both CPU architectures: each role finds an OS vars file, and what it would install
is what the distribution or vendor names.

gpufleet_node.os comes from the real parser (sysfs.os_summary(sysfs.parse_os_release(text))) over real os-release
texts (tests/fixtures/os-release/<name>, each naming its source). Each role's vars lookup is read from its own
tasks/main.yml (the first_found list), rendered for the node and resolved against roles/<role>/vars like Ansible's
first_found does. Derived settings (DCGM package, CUDA repository URL, node_exporter tarball) are rendered from the
roles' own defaults/vars over the shared settings (roles/gpufleet_defaults) by Ansible's templar with the collection's
filters.

No EL9 or Ubuntu package archive is reachable from the test machines: the Rocky/RHEL 9 and Ubuntu rows are checked
here only, against the package names the distributions publish (cited per row), never installed.
"""
import atexit
import functools
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.module_utils import sysfs
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import dcgm

from conftest import COLLECTIONS, ROOT, fixture_parts

ROLES = os.path.join(ROOT, "roles")

# name -> (fixture, id, major, family, codename)
OS_ROWS = {
    "debian-12": ("debian-12-bookworm", "debian", "12", "Debian", "bookworm"),
    "debian-13": ("debian-13-trixie", "debian", "13", "Debian", "trixie"),
    "ubuntu-22.04": ("ubuntu-22.04-jammy", "ubuntu", "22.04", "Debian", "jammy"),
    "ubuntu-24.04": ("ubuntu-24.04-noble", "ubuntu", "24.04", "Debian", "noble"),
    "rocky-9": ("rocky-9", "rocky", "9", "RedHat", ""),
    "rhel-9": ("rhel-9", "rhel", "9", "RedHat", ""),
}
MACHINES = ("x86_64", "aarch64")
MATRIX = [(name, machine) for name in OS_ROWS for machine in MACHINES]

# Roles that pick an OS vars file with first_found in tasks/main.yml.
FIRST_FOUND_ROLES = ("cluster_ssh", "container_runtime", "fail2ban", "gpu_monitoring", "image_security",
                     "interconnect", "os_hardening", "ssh_hardening")

# ---- driver packages --------------------------------------------------------------------------------------------
# The nvidia_driver role's default source per OS, the branch that source offers, and the packages its plan installs
# (open kernel modules; headers for a typical kernel of the release). Sources per row:
#   Debian 12/13: packages.debian.org (non-free) nvidia-driver 535.261 in bookworm, 550.163 in trixie,
#     nvidia-open-kernel-dkms, firmware-nvidia-gsp, nvidia-smi, libcuda1, nvidia-persistenced; linux-headers-amd64
#     / linux-headers-arm64 follow the kernel.
#   Ubuntu 22.04/24.04: packages.ubuntu.com nvidia-headless-580-server-open, nvidia-utils-580-server (restricted);
#     linux-headers-generic.
#   Rocky/RHEL 9: NVIDIA Driver Installation Guide, "Red Hat Enterprise Linux 9": `dnf module enable
#     nvidia-driver:580-open`, kernel-devel-matched, kernel-headers, dkms from EPEL; the fabric manager is
#     nvidia-fabric-manager; the repository is .../cuda/repos/rhel9/x86_64 or /sbsa (aarch64 servers).
DRIVER_ROWS = {
    "debian-12": ("debian", "535", ["nvidia-driver", "nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi",
                                    "libcuda1", "nvidia-persistenced"], "6.1.0-26-{arch}", "linux-headers-{arch}"),
    "debian-13": ("debian", "550", ["nvidia-driver", "nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi",
                                    "libcuda1", "nvidia-persistenced"], "6.12.48+deb13-{arch}", "linux-headers-{arch}"),
    "ubuntu-22.04": ("ubuntu", "580", ["nvidia-headless-580-server-open", "nvidia-utils-580-server"],
                     "6.8.0-45-generic", "linux-headers-generic"),
    "ubuntu-24.04": ("ubuntu", "580", ["nvidia-headless-580-server-open", "nvidia-utils-580-server"],
                     "6.8.0-45-generic", "linux-headers-generic"),
    "rocky-9": ("cuda", "580", ["@nvidia-driver:580-open"], "5.14.0-427.13.1.el9_4.{machine}", "kernel-devel-matched"),
    "rhel-9": ("cuda", "580", ["@nvidia-driver:580-open"], "5.14.0-427.13.1.el9_4.{machine}", "kernel-devel-matched"),
}
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# -----------------------------------------------------------------------------------------------------------------


def node(name, machine):
    fixture, _unused, _unused, _unused, _unused = OS_ROWS[name]
    _unused, text = fixture_parts("os-release", fixture)
    return {"os": sysfs.os_summary(sysfs.parse_os_release(text)), "machine": machine, "gpu_count": 8,
            "container": False}


@functools.lru_cache(maxsize=None)
def load_yaml(*parts):
    """A role file as YAML (cached: the tests only read what it returns)."""
    with open(os.path.join(*parts)) as handle:
        return yaml.safe_load(handle) or {}


# ---- the roles' Jinja settings, rendered by Ansible's own templar ------------------------------------------------
# A helper process renders them with ansible-core's Templar and the collection finder over this checkout's
# collections path (as ansible-playbook resolves gpufleet.cluster.* filters), the files' strings trusted as
# templates as role files are. A process of its own: installing the finder here would change how the other test
# modules import ansible_collections.
RENDERER = r"""
import json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    return value

for line in sys.stdin:
    request = json.loads(line)
    variables = {}
    for layer in request["layers"]:
        variables.update(trusted(layer))
    try:
        templar = Templar(loader=DataLoader(), variables=variables)
        source = variables[request["key"]] if request["key"] in variables else trust_as_template(request["key"])
        answer = {"value": templar.template(source)}
    except Exception as exc:  # reported to the test, which fails with it
        answer = {"error": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


@functools.lru_cache(maxsize=None)
def renderer():
    process = subprocess.Popen([sys.executable, "-c", RENDERER, COLLECTIONS], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
    atexit.register(process.kill)
    return process


class RoleVars(object):
    """Layered role variables (shared defaults < defaults < vars/main.yml < OS vars < extra); a lookup renders the
    value."""

    def __init__(self, *layers):
        self.layers = list(layers)

    def __getitem__(self, key):
        process = renderer()
        process.stdin.write(json.dumps({"layers": self.layers, "key": key}) + "\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        assert "error" not in answer, "%s: %s" % (key, answer.get("error"))
        return answer["value"]

    def render(self, text):
        return self[text]


def role_vars(role, gpufleet_node, os_vars_file=None, **extra):
    # Every role depends on gpufleet_defaults: its defaults come with the role's own, below them.
    layers = [load_yaml(ROLES, "gpufleet_defaults", "defaults", "main.yml"), load_yaml(ROLES, role, "defaults", "main.yml")]
    if os.path.exists(os.path.join(ROLES, role, "vars", "main.yml")):
        layers.append(load_yaml(ROLES, role, "vars", "main.yml"))
    if os_vars_file:
        layers.append(load_yaml(os_vars_file))
    layers.append(dict(extra, gpufleet_node=gpufleet_node, role_path=os.path.join(ROLES, role)))
    return RoleVars(*layers)


# ---- the roles' OS vars lookup -------------------------------------------------------------------------------------
# The one way every role loads its OS variables (docs/development.md): first_found over os_vars_files.
OS_VARS_FILE = "{{ lookup('ansible.builtin.first_found', gpufleet_node.os | gpufleet.cluster.os_vars_files(role_path)) }}"


def include_vars_tasks():
    """(role, task file, task) for every include_vars task of every role."""
    found = []
    for role in sorted(os.listdir(ROLES)):
        tasks_dir = os.path.join(ROLES, role, "tasks")
        for name in sorted(os.listdir(tasks_dir)) if os.path.isdir(tasks_dir) else []:
            for task in load_yaml(tasks_dir, name) or []:
                if "ansible.builtin.include_vars" in task:
                    found.append((role, name, task))
    return found


def resolve_os_vars(role, gpufleet_node):
    """The file the role's include_vars task picks for this node (Ansible's own first_found rendering the task's
    expression), or None when there is none."""
    tasks = [task for task in load_yaml(ROLES, role, "tasks", "main.yml") if "ansible.builtin.include_vars" in task]
    assert len(tasks) == 1, "%s: tasks/main.yml loads no OS vars file" % role
    assert tasks[0]["ansible.builtin.include_vars"] == {"file": OS_VARS_FILE}, role
    context = RoleVars({"gpufleet_node": gpufleet_node, "role_path": os.path.join(ROLES, role)})
    candidates = context.render("{{ gpufleet_node.os | gpufleet.cluster.os_vars_files(role_path) }}")
    existing = [path for path in candidates if os.path.isfile(path)]
    if not existing:
        return None
    picked = context.render(OS_VARS_FILE)
    assert picked == existing[0], (role, picked, existing)
    return picked


def test_every_role_loads_its_os_vars_one_way():
    tasks = include_vars_tasks()
    assert {role for role, _unused, _unused in tasks} >= {"nvidia_driver", "os_hardening", "ssh_hardening"}
    for role, name, task in tasks:
        assert task["ansible.builtin.include_vars"] == {"file": OS_VARS_FILE}, "%s/tasks/%s" % (role, name)
    for role in os.listdir(ROLES):
        for name in os.listdir(os.path.join(ROLES, role, "vars")) if os.path.isdir(os.path.join(ROLES, role, "vars")) else []:
            # One casing: the distribution or family capitalised as os_vars_files writes it.
            assert name == "main.yml" or name[:1].isupper(), "%s/vars/%s" % (role, name)


def test_os_vars_files_order_and_casing():
    from ansible_collections.gpufleet.cluster.plugins.filter.os_vars import os_vars_files
    assert os_vars_files({"id": "debian", "major": "13", "family": "Debian"}, "/r") == [
        "/r/vars/Debian-13.yml", "/r/vars/Debian.yml"]
    assert os_vars_files({"id": "rocky", "major": "9", "family": "RedHat"}, "/r") == [
        "/r/vars/Rocky-9.yml", "/r/vars/Rocky.yml", "/r/vars/RedHat.yml"]
    with pytest.raises(Exception, match="id, major and family"):
        os_vars_files({"id": "debian"}, "/r")


def os_vars(role, name, machine):
    gpufleet_node = node(name, machine)
    found = resolve_os_vars(role, gpufleet_node)
    assert found, "%s finds no OS vars file for %s" % (role, name)
    return load_yaml(found), role_vars(role, gpufleet_node, found)


# ---- the OS facts ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(OS_ROWS))
def test_os_release_gives_the_facts_the_roles_select_on(name):
    _unused, os_id, major, family, codename = OS_ROWS[name]
    summary = node(name, "x86_64")["os"]
    assert (summary["id"], summary["major"], summary["family"], summary["codename"]) == (os_id, major, family, codename)
    assert sysfs.os_support_problem(summary) is None


@pytest.mark.parametrize("name, machine", MATRIX)
@pytest.mark.parametrize("role", FIRST_FOUND_ROLES)
def test_every_role_finds_os_vars(role, name, machine):
    found = resolve_os_vars(role, node(name, machine))
    assert found is not None, "%s has no vars file for %s" % (role, name)
    family = OS_ROWS[name][3]
    # Only files of this OS family (or this OS) may be picked: no Debian paths on EL and the reverse.
    assert os.path.basename(found).split("-")[0].split(".")[0].lower() in (family.lower(), OS_ROWS[name][1])


@pytest.mark.parametrize("name", sorted(OS_ROWS))
def test_nvidia_container_toolkit_has_an_install_file_per_family(name):
    # The toolkit's and the Docker engine's install files go by package manager: install_apt.yml, install_dnf.yml.
    for role, tasks_file in (("nvidia_container_toolkit", "toolkit.yml"), ("container_runtime", "main.yml")):
        task = next(t for t in load_yaml(ROLES, role, "tasks", tasks_file)
                    if str((t.get("ansible.builtin.include_tasks") or {}).get("file", "")).startswith("install_"))
        picked = RoleVars({"gpufleet_node": node(name, "x86_64")}).render(task["ansible.builtin.include_tasks"]["file"])
        assert picked == ("install_apt.yml" if node(name, "x86_64")["os"]["family"] == "Debian" else "install_dnf.yml")
        assert os.path.isfile(os.path.join(ROLES, role, "tasks", picked)), (role, picked)


# ---- os_hardening ------------------------------------------------------------------------------------------------
# Debian/Ubuntu names: the Debian (bookworm, trixie) and Ubuntu (jammy, noble) package archives' package lists
# (libpam-pwquality, libpam-tmpdir, aide + aide-common, chkrootkit, debsums, apt-show-versions, apt-listchanges,
# needrestart, sysstat, acct, auditd all exist under these names in all four).
# Rocky/RHEL 9 names: Rocky Linux 9 / RHEL 9 BaseOS and AppStream package lists (libpwquality, aide, sysstat,
# psacct, audit, yum-utils [dnf-plugins-core; provides needs-restarting and the dnf-utils name], dnf-automatic);
# chkrootkit from EPEL 9 (Fedora's chkrootkit package built for epel9). Not checked against a live EL9 index here.
OS_HARDENING_DEBIAN = {
    "password_quality": ["libpam-pwquality"],
    "pam_tmpdir": ["libpam-tmpdir"],
    "file_integrity": ["aide", "aide-common"],
    "rootkit_scanner": ["chkrootkit"],
    "package_tools": ["debsums", "apt-show-versions", "apt-listchanges", "needrestart"],
    "accounting": ["sysstat"],
}
OS_HARDENING_EL9 = {
    "password_quality": ["libpwquality"],
    "pam_tmpdir": [],
    "file_integrity": ["aide"],
    "rootkit_scanner": ["chkrootkit"],
    "package_tools": ["yum-utils"],
    "accounting": ["sysstat"],
}


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_packages_and_paths(name, machine):
    values, _unused = os_vars("os_hardening", name, machine)
    el = OS_ROWS[name][3] == "RedHat"
    assert values["__os_hardening_concern_packages"] == (OS_HARDENING_EL9 if el else OS_HARDENING_DEBIAN)
    assert values["__os_hardening_host_packages"] == {"accounting": ["psacct", "audit"] if el else ["acct", "auditd"]}
    assert values["__os_hardening_unattended_packages"] == (["dnf-automatic"] if el else ["unattended-upgrades"])
    assert values["__os_hardening_host_accounting_units"] == (
        ["psacct.service", "auditd.service"] if el else ["acct.service", "auditd.service"])
    # AIDE: EL9 keeps one /etc/aide.conf and a gzip database (aide 0.16's own defaults); Debian's aide-common a
    # conf.d directory, an uncompressed database and dailyaidecheck.timer.
    if el:
        assert (values["__os_hardening_aide_config"], values["__os_hardening_aide_database"],
                values["__os_hardening_aide_database_new"]) == (
            "/etc/aide.conf", "/var/lib/aide/aide.db.gz", "/var/lib/aide/aide.db.new.gz")
        assert values["__os_hardening_aide_exclude_file"] == "" and values["__os_hardening_aide_timer"] == ""
    else:
        assert values["__os_hardening_aide_config"] == "/etc/aide/aide.conf"
        assert values["__os_hardening_aide_exclude_file"].startswith("/etc/aide/aide.conf.d/")
        assert values["__os_hardening_aide_timer"] == "dailyaidecheck.timer"
    # Nothing Debian-only is installed on EL, and the reverse.
    every = [pkg for names in values["__os_hardening_concern_packages"].values() for pkg in names]
    if el:
        assert not {"needrestart", "debsums", "acct", "auditd", "aide-common"} & set(every)
    else:
        assert not {"psacct", "audit", "yum-utils"} & set(every)


def test_os_hardening_apt_and_dpkg_tasks_only_run_on_debian():
    """Every task that calls apt, dpkg or a Debian-only file runs only where gpufleet_node.os.family == 'Debian'."""
    debian_only = ("ansible.builtin.apt", "dpkg-statoverride", "apt-get", "unattended-upgrade ", "/etc/default/",
                   "/etc/apt/", "chkrootkit.conf", "needrestart", "chkrootkit.timer")
    tasks_dir = os.path.join(ROLES, "os_hardening", "tasks")
    checked = 0
    for file_name in sorted(os.listdir(tasks_dir)):
        for task in _flatten(load_yaml(tasks_dir, file_name)):
            if "ansible.builtin.debug" in task:
                continue  # the lines that say on EL what is skipped and why
            if "gpufleet.cluster.systemd_units" in task:
                continue  # its Jinja picks the units per OS: test_os_hardening_units_per_os renders it
            if file_name == "system.yml" and "gpufleet.cluster.managed_files" in task:
                continue  # its Jinja picks the apt files per OS: test_os_hardening_files_per_os renders it
            if file_name == "tools.yml" and "gpufleet.cluster.line_settings" in task:
                continue  # its Jinja picks Debian's files: test_os_hardening_line_files_per_os renders it
            if file_name == "tools.yml" and "gpufleet.cluster.managed_files" in task:
                continue  # its Jinja picks Debian's files: test_os_hardening_tool_files_per_os renders it
            text = yaml.safe_dump({k: v for k, v in task.items() if k not in ("name", "when", "block")})
            shell = task.get("ansible.builtin.shell") or ""
            shell = shell.get("cmd", "") if isinstance(shell, dict) else shell
            if "if command -v dpkg-statoverride >/dev/null; then" in shell:
                # compilers.yml's one read for every OS: dpkg-statoverride only where the shell finds it.
                assert [m for m in debian_only if m in shell] == ["dpkg-statoverride"], task.get("name")
                checked += 1
                continue
            if any(marker in text for marker in debian_only):
                when = task.get("when") or []
                when = [when] if isinstance(when, str) else when
                assert "gpufleet_node.os.family == 'Debian'" in when, "%s: %s" % (file_name, task.get("name"))
                checked += 1
    assert checked >= 6  # the Debian-only line settings and tool files are one call each, rendered per OS below


def hardening_task(file_name, module):
    """The one task of os_hardening's tasks/<file_name> that calls module."""
    tasks = [task for task in load_yaml(ROLES, "os_hardening", "tasks", file_name) if module in task]
    assert len(tasks) == 1
    return tasks[0]


def hardening_task_vars(gpufleet_node, task, switches, **extra):
    """The variables an os_hardening task sees on this node: the role's, extra (registered results, magic
    variables), the task's own vars and the os_hardening_<switch> settings given."""
    return role_vars("os_hardening", gpufleet_node, resolve_os_vars("os_hardening", gpufleet_node), **dict(
        extra, **dict(task["vars"], **dict(("os_hardening_" + key, value) for key, value in switches.items()))))


def hardening_units(name, machine, container=False, cron=False, check_mode=False, tools_changed=False, written=(),
                    nft_written=None, **switches):
    """(units, daemon_reload) the os_hardening systemd_units task passes on this node, rendered by Ansible's templar
    with the results the role's earlier tasks registered (written: the paths tools.yml's managed_files call changed;
    nft_written: those nftables.yml's changed, None when it did not run)."""
    task = hardening_task("main.yml", "gpufleet.cluster.systemd_units")
    registered = {"__os_hardening_install_tools": {"changed": tools_changed},
                  "__os_hardening_install_tools_dnf": {"changed": False}, "__os_hardening_install": {"changed": False},
                  "__os_hardening_cron": {"stat": {"exists": cron}},
                  "__os_hardening_tools_written": {"changed": bool(written), "changed_files": list(written)}}
    if nft_written is not None:
        registered["__os_hardening_nftables_files"] = {"changed": bool(nft_written), "changed_files": list(nft_written)}
    variables = hardening_task_vars(dict(node(name, machine), container=container), task, switches,
                                    ansible_check_mode=check_mode, **registered)
    module_args = task["gpufleet.cluster.systemd_units"]
    if not variables.render("{{ %s }}" % task["when"]):
        return None  # the task is skipped
    return variables.render(module_args["units"]), variables.render(module_args["daemon_reload"])


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_units_per_os(name, machine):
    """The units the role's one systemd_units call brings up: each concern's units under its switch, the Debian-only
    timers only on Debian/Ubuntu, the host accounting only outside a container, debsums' timer only without cron."""
    el = OS_ROWS[name][3] == "RedHat"
    units, reload = hardening_units(name, machine)
    names = [unit["name"] for unit in units]
    assert all(unit["state"] == "started" and unit["enabled"] is True for unit in units)
    sysstat = ["sysstat.service", "sysstat-collect.timer", "sysstat-summary.timer"]
    if el:
        assert names == ["dnf-automatic.timer"] + sysstat + ["psacct.service", "auditd.service"]
    else:
        assert names == (["unattended-upgrades", "dailyaidecheck.timer", "chkrootkit.timer", "gpufleet-debsums.timer"]
                         + sysstat + ["acct.service", "auditd.service"])
    # A daemon-reload only when a unit file of the role's own changed in this run: never on a run that wrote none.
    assert reload is False
    timer = "/etc/systemd/system/gpufleet-debsums.timer"
    assert hardening_units(name, machine, written=[timer])[1] is True
    assert hardening_units(name, machine, written=["/etc/systemd/system/gpufleet-debsums.service"])[1] is True
    assert hardening_units(name, machine, written=["/etc/needrestart/conf.d/60-gpufleet.conf",
                                                   "/etc/audit/rules.d/60-gpufleet.rules"])[1] is False
    names = [unit["name"] for unit in hardening_units(name, machine, container=True, cron=True, nftables=True)[0]]
    assert "auditd.service" not in names and "gpufleet-debsums.timer" not in names
    assert names[-1] == "gpufleet-nftables"
    assert hardening_units(name, machine, container=True, cron=True, nftables=True, nft_written=[])[1] is False
    assert hardening_units(name, machine, container=True, cron=True, nftables=True,
                           nft_written=["/etc/systemd/system/gpufleet-nftables.service"])[1] is True
    # The policy alone changed: its handler restarts the loader; the unit file is as it was.
    assert hardening_units(name, machine, container=True, cron=True, nftables=True,
                           nft_written=["/etc/nftables.d/gpufleet.nft"])[1] is False
    off = dict(unattended_upgrades=False, file_integrity=False, rootkit_scanner=False, package_tools=False,
               accounting=False)
    assert hardening_units(name, machine, **off) is None
    assert [unit["name"] for unit in hardening_units(name, machine, nftables=True, **off)[0]] == ["gpufleet-nftables"]
    # Check mode on a node whose tools would be installed first: only the units of what is there already.
    names = [unit["name"] for unit in hardening_units(name, machine, check_mode=True, tools_changed=True)[0]]
    assert names == ["dnf-automatic.timer" if el else "unattended-upgrades"]


def hardening_files(name, machine, **switches):
    """The destinations (in order) of os_hardening's one managed_files call in system.yml on this node, rendered by
    Ansible's templar."""
    task = hardening_task("system.yml", "gpufleet.cluster.managed_files")
    assert "when" not in task
    variables = hardening_task_vars(node(name, machine), task, switches)
    return [item["dest"] for item in variables.render(task["gpufleet.cluster.managed_files"]["files"])]


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_files_per_os(name, machine):
    """system.yml's one managed_files call: the modprobe, limits and profile files everywhere, the banner and the
    coredump drop-in under their switches, apt's upgrade settings only on Debian/Ubuntu (the blacklist also for
    security_updates_now alone)."""
    el = OS_ROWS[name][3] == "RedHat"
    base = ["/etc/modprobe.d", "/etc/modprobe.d/gpufleet-hardening.conf",
            "/etc/security/limits.d/60-gpufleet-hardening.conf", "/etc/profile.d/gpufleet-hardening.sh"]
    login = ["/etc/issue", "/etc/issue.net", "/etc/systemd/coredump.conf.d",
             "/etc/systemd/coredump.conf.d/60-gpufleet.conf"]
    apt = ["/etc/apt/apt.conf.d/21gpufleet-auto-upgrades", "/etc/apt/apt.conf.d/52gpufleet-unattended-upgrades"]
    assert hardening_files(name, machine) == base + login + ([] if el else apt)
    assert hardening_files(name, machine, unattended_upgrades=False, security_updates_now=False) == base + login
    assert hardening_files(name, machine, unattended_upgrades=False, security_updates_now=True) == (
        base + login + ([] if el else apt[1:]))
    assert hardening_files(name, machine, banner="", disable_core_dumps=False) == base + ([] if el else apt)


def hardening_tool_files(name, machine, container=False, cron=False, check_mode=False, tools_changed=False,
                         **switches):
    """The destinations (in order) of os_hardening's one managed_files call for the tools' files in tools.yml on this
    node (None when skipped), rendered by Ansible's templar."""
    task = hardening_task("tools.yml", "gpufleet.cluster.managed_files")
    registered = {"__os_hardening_install_tools": {"changed": tools_changed},
                  "__os_hardening_install_tools_dnf": {"changed": False}}
    if OS_ROWS[name][3] != "RedHat" and switches.get("package_tools", True):
        registered["__os_hardening_cron"] = {"stat": {"exists": cron}}
    variables = hardening_task_vars(dict(node(name, machine), container=container), task, switches,
                                    ansible_check_mode=check_mode, **registered)
    if not variables.render("{{ %s }}" % task["when"]):
        return None
    return [item["dest"] for item in variables.render(task["gpufleet.cluster.managed_files"]["files"])]


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_tool_files_per_os(name, machine):
    """tools.yml's one managed_files call: AIDE's exclude file (Debian's conf.d), needrestart's drop-in and, without
    cron, the debsums unit and timer only on Debian/Ubuntu, the audit rules on a real host; each under its switch,
    and none in check mode while the tools are still to be installed."""
    el = OS_ROWS[name][3] == "RedHat"
    aide = ["/etc/aide/aide.conf.d/99_gpufleet_exclude"]
    needrestart = ["/etc/needrestart/conf.d/60-gpufleet.conf"]
    debsums = ["/etc/systemd/system/gpufleet-debsums.service", "/etc/systemd/system/gpufleet-debsums.timer"]
    audit = ["/etc/audit/rules.d/60-gpufleet.rules"]
    assert hardening_tool_files(name, machine) == ([] if el else aide + needrestart + debsums) + audit
    assert hardening_tool_files(name, machine, cron=True) == ([] if el else aide + needrestart) + audit
    assert hardening_tool_files(name, machine, container=True, cron=True) == ([] if el else aide + needrestart)
    assert hardening_tool_files(name, machine, file_integrity=False, package_tools=False) == audit
    assert hardening_tool_files(name, machine, accounting=False, cron=True) == ([] if el else aide + needrestart)
    assert hardening_tool_files(name, machine, check_mode=True, tools_changed=True) is None
    assert hardening_tool_files(name, machine, check_mode=True) == hardening_tool_files(name, machine)


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_refreshes_the_lists_only_when_apt_would(name, machine):
    """The list refresh before the security updates runs on Debian/Ubuntu when preflight found the lists an hour old
    or more, or did not say (then the apt module's own cache_valid_time decides); never on EL."""
    task = hardening_task("security_updates.yml", "ansible.builtin.apt")
    assert task["ansible.builtin.apt"]["cache_valid_time"] == 3600

    def runs(**extra):
        variables = hardening_task_vars(node(name, machine), dict(task, vars={}), {}, **extra)
        return all(variables.render("{{ %s }}" % condition) for condition in task["when"])

    debian = OS_ROWS[name][3] != "RedHat"
    assert runs() is debian
    assert runs(preflight_package_lists_age=None) is debian
    assert runs(preflight_package_lists_age=7200) is debian
    assert runs(preflight_package_lists_age=3600) is debian
    assert runs(preflight_package_lists_age=3599) is False
    assert runs(preflight_package_lists_age=120) is False


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_simulates_the_upgrade_unless_this_apt_state_was_found_settled(name, machine):
    """apt's upgrade simulation runs on Debian/Ubuntu unless preflight's fingerprint of apt's inputs is the one the
    fact cache says was last checked with nothing pending; that fingerprint is remembered only after a check of the
    very state preflight read (no list refresh in between) that left nothing to apply."""
    tasks = {task["name"]: task for task in load_yaml(ROLES, "os_hardening", "tasks", "security_updates.yml")}
    simulate = tasks["List the upgradable packages"]
    apply = tasks["Apply the security updates (unattended-upgrade)"]
    remember = tasks["Remember the package state that has no security update pending"]
    assert remember["ansible.builtin.set_fact"] == {"__os_hardening_apt_settled": "{{ preflight_apt_state }}",
                                                    "cacheable": True}

    def runs(task, **extra):
        variables = hardening_task_vars(node(name, machine), dict(task, vars={}), {}, **extra)
        return all(variables.render("{{ %s }}" % condition) for condition in task["when"])

    debian = OS_ROWS[name][3] != "RedHat"
    settled = {"__os_hardening_apt_settled": "0f3c"}
    assert runs(simulate, ansible_facts={}) is debian  # preflight gave no fingerprint
    assert runs(simulate, ansible_facts=settled, preflight_apt_state=None) is debian
    assert runs(simulate, ansible_facts={}, preflight_apt_state="0f3c") is debian  # nothing remembered
    assert runs(simulate, ansible_facts=settled, preflight_apt_state="9a1b") is debian  # apt's inputs changed
    assert runs(simulate, ansible_facts=settled, preflight_apt_state="0f3c") is False

    inst = {"stdout_lines": ["Inst libssl3 [3.5.1-1] (3.5.4-1 Debian-Security:13/stable-security [amd64])"]}
    assert runs(apply, __os_hardening_upgradable={"skipped": True, "changed": False}) is False
    assert runs(apply, __os_hardening_upgradable={"stdout_lines": ["0 upgraded, 0 newly installed"]}) is False
    assert runs(apply, __os_hardening_upgradable=inst) is debian

    def remembers(**changes):
        checked = dict(preflight_apt_state="0f3c", __os_hardening_upgradable={"stdout_lines": []},
                       __os_hardening_lists={"skipped": True, "changed": False},
                       __os_hardening_security_updates={"skipped": True, "changed": False})
        checked.update(changes)
        return runs(remember, **checked)

    assert remembers() is debian
    assert remembers(__os_hardening_security_updates={"changed": False}) is debian
    assert remembers(__os_hardening_security_updates={"changed": True}) is False
    assert remembers(__os_hardening_lists={"changed": False}) is False  # the lists were refreshed
    assert remembers(__os_hardening_upgradable={"skipped": True, "changed": False}) is False
    assert remembers(preflight_apt_state=None) is False


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_includes_the_upgrades_only_when_they_have_work(name, machine):
    """main.yml includes unattended_upgrades.yml only when one of its tasks would run: the package to install, EL's
    dnf-automatic settings and errata, or on Debian/Ubuntu the list refresh or the upgrade simulation of
    security_updates.yml (the same conditions its tasks have). A settled no-op costs one skipped result."""
    task = next(task for task in load_yaml(ROLES, "os_hardening", "tasks", "main.yml")
                if task.get("ansible.builtin.include_tasks") == "unattended_upgrades.yml")
    el = OS_ROWS[name][3] == "RedHat"
    package = "dnf-automatic" if el else "unattended-upgrades"
    installed = {package: [{"name": package, "version": "1", "arch": "all", "source": "rpm" if el else "apt"}]}

    def due(switches=None, **extra):
        settled = dict(preflight_packages=installed, preflight_package_lists_age=120, preflight_apt_state="0f3c",
                       ansible_facts={"__os_hardening_apt_settled": "0f3c"})
        settled.update(extra)
        variables = hardening_task_vars(node(name, machine), dict(task, vars={}), switches or {}, **settled)
        return variables.render("{{ %s }}" % task["when"])

    assert due() is el
    assert due(preflight_packages={}) is True  # the package is missing
    assert due(preflight_package_lists_age=3600) is True
    assert due(preflight_package_lists_age=None) is True
    assert due(preflight_apt_state="9a1b") is True
    assert due(ansible_facts={}) is True
    assert due(preflight_apt_state=None) is True
    assert due({"security_updates_now": False}, preflight_apt_state="9a1b") is el
    assert due({"security_updates_now": False, "unattended_upgrades": False}, preflight_packages={}) is False


def hardening_line_files(name, machine, check_mode=False, tools_changed=False, **switches):
    """{path: settings} of os_hardening's one line_settings call in tools.yml on this node (None when skipped),
    rendered by Ansible's templar with the install's registered results."""
    task = hardening_task("tools.yml", "gpufleet.cluster.line_settings")
    registered = {"__os_hardening_install_tools": {"changed": tools_changed},
                  "__os_hardening_install_tools_dnf": {"changed": False}}
    variables = hardening_task_vars(node(name, machine), task, switches, ansible_check_mode=check_mode, **registered)
    if not variables.render("{{ %s }}" % task["when"]):
        return None
    files = variables.render(task["gpufleet.cluster.line_settings"]["files"])
    return dict((item["path"], item["settings"]) for item in files)


@pytest.mark.parametrize("name, machine", MATRIX)
def test_os_hardening_line_files_per_os(name, machine):
    """tools.yml's one line_settings call: login.defs everywhere under its switch; AIDE's digests, chkrootkit's
    options, debsums' schedule and sysstat's switch only on Debian/Ubuntu, each under its concern's switch, and
    not in check mode while the tools are still to be installed."""
    el = OS_ROWS[name][3] == "RedHat"
    tools = {"/etc/aide/aide.conf": {"Checksums": "sha256+sha512"},
             "/etc/chkrootkit/chkrootkit.conf": {"RUN_DAILY": "true", "RUN_DAILY_OPTS": "-n", "DIFF_MODE": "true"},
             "/etc/default/debsums": {"CRON_CHECK": "weekly"}, "/etc/default/sysstat": {"ENABLED": '"true"'}}
    files = hardening_line_files(name, machine)
    assert list(files) == ["/etc/login.defs"] + ([] if el else list(tools))
    assert files["/etc/login.defs"]["UMASK"] == "027" and "PASS_MAX_DAYS" not in files["/etc/login.defs"]
    for path, settings in tools.items():
        assert el or files[path] == settings
    assert list(hardening_line_files(name, machine, check_mode=True, tools_changed=True)) == ["/etc/login.defs"]
    assert list(hardening_line_files(name, machine, check_mode=True)) == list(files)
    off = dict(file_integrity=False, rootkit_scanner=False, package_tools=False, accounting=False)
    assert list(hardening_line_files(name, machine, rootkit_scanner=False, accounting=False)) == (
        ["/etc/login.defs"] + ([] if el else ["/etc/aide/aide.conf", "/etc/default/debsums"]))
    assert list(hardening_line_files(name, machine, **off)) == ["/etc/login.defs"]
    assert hardening_line_files(name, machine, login_defs=False, **off) is None


def _flatten(tasks):
    for task in tasks or []:
        if "block" in task:
            yield from _flatten(task["block"])
        else:
            yield task


# ---- fail2ban ----------------------------------------------------------------------------------------------------
# Debian/Ubuntu: fail2ban + python3-systemd (journal backend); sshd's unit is ssh.service there.
# Rocky/RHEL 9: EPEL 9's fail2ban is split into fail2ban-server, fail2ban-systemd (python3-systemd,
# backend = systemd), fail2ban-firewalld and fail2ban-sendmail; sshd's unit is sshd.service; iptables-nft is
# EL9's iptables.
@pytest.mark.parametrize("name, machine", MATRIX)
def test_fail2ban_packages_and_journal(name, machine):
    values, _unused = os_vars("fail2ban", name, machine)
    if OS_ROWS[name][3] == "RedHat":
        assert values["__fail2ban_packages"] == ["fail2ban-server", "fail2ban-systemd"]
        assert values["__fail2ban_banaction_packages"] == {"nftables": ["nftables"], "iptables": ["iptables-nft"]}
        assert values["__fail2ban_journalmatch"].startswith("_SYSTEMD_UNIT=sshd.service ")
    else:
        assert values["__fail2ban_packages"] == ["fail2ban", "python3-systemd"]
        assert values["__fail2ban_banaction_packages"] == {"nftables": ["nftables"], "iptables": ["iptables"]}
        assert values["__fail2ban_journalmatch"].startswith("_SYSTEMD_UNIT=ssh.service ")
    assert "_COMM=sshd" in values["__fail2ban_journalmatch"]


# ---- interconnect ------------------------------------------------------------------------------------------------
# Debian/Ubuntu: rdma-core, ibverbs-utils, infiniband-diags, ucx-utils (libucx0 carries every transport),
# openmpi-bin, libopenmpi-dev, python3-mpi4py; Open MPI 5 on Debian 13, 4.1 on Debian 12 / Ubuntu 22.04 / 24.04.
# Rocky/RHEL 9 (AppStream): ucx plus its transport subpackages ucx-ib (verbs/mlx5) and ucx-rdmacm; openmpi 4.1 with
# its configuration in /etc/openmpi-<arch> (openmpi-x86_64 / openmpi-aarch64).
@pytest.mark.parametrize("name, machine", MATRIX)
def test_interconnect_packages(name, machine):
    values, rendered = os_vars("interconnect", name, machine)
    packages = values["__interconnect_os_packages"]
    if OS_ROWS[name][3] == "RedHat":
        assert {"rdma-core", "libibverbs-utils", "infiniband-diags", "ucx", "ucx-ib", "ucx-rdmacm", "openmpi",
                "openmpi-devel"} <= set(packages)
        assert rendered["__interconnect_openmpi_sysconfdir"] == "/etc/openmpi-" + machine
        assert values["__interconnect_openmpi_major"] == 4
    else:
        assert {"rdma-core", "ibverbs-utils", "infiniband-diags", "ucx-utils", "openmpi-bin",
                "libopenmpi-dev"} <= set(packages)
        assert rendered["__interconnect_openmpi_sysconfdir"] == "/etc/openmpi"
        assert values["__interconnect_openmpi_major"] == (5 if name == "debian-13" else 4)


# ---- ssh, container engine, image trust store ---------------------------------------------------------------------
@pytest.mark.parametrize("name, machine", MATRIX)
def test_ssh_container_runtime_and_trust_store(name, machine):
    el = OS_ROWS[name][3] == "RedHat"
    ssh, _unused = os_vars("ssh_hardening", name, machine)
    # OpenSSH's unit: ssh.service on Debian/Ubuntu, sshd.service on EL.
    assert (ssh["__ssh_hardening_package"], ssh["__ssh_hardening_service"]) == ("openssh-server", "sshd" if el else "ssh")
    engine, _unused = os_vars("container_runtime", name, machine)
    # Debian/Ubuntu ship docker.io; EL ships only podman, so Docker's own docker-ce repository is the one source.
    assert engine["__container_runtime_packages"]["os"] == ([] if el else ["docker.io"])
    assert engine["__container_runtime_packages"]["docker"] == ["docker-ce", "docker-ce-cli", "containerd.io"]
    trust, _unused = os_vars("image_security", name, machine)
    assert trust["__image_security_ca_trust_update"] == (["update-ca-trust", "extract"] if el else ["update-ca-certificates"])
    # cosign is packaged from Debian 13 (trixie) on only.
    assert trust["__image_security_cosign_packaged"] is (name == "debian-13")


# ---- gpu_monitoring: architecture, DCGM package, the shared CUDA source ------------------------------------------
# NVIDIA's CUDA repository directories: developer.download.nvidia.com/compute/cuda/repos/<distro>/<x86_64|sbsa>
# (aarch64 servers such as Grace GH200/GB200 use sbsa). Prometheus publishes node_exporter-<v>.linux-amd64.tar.gz and
# .linux-arm64.tar.gz on each GitHub release. DCGM: https://docs.nvidia.com/datacenter/dcgm/latest/installation.html
# (datacenter-gpu-manager-4-cuda<CUDA major the driver reports>).
CUDA_DISTRO = {"debian-12": "debian12", "debian-13": "debian13", "ubuntu-22.04": "ubuntu2204",
               "ubuntu-24.04": "ubuntu2404", "rocky-9": "rhel9", "rhel-9": "rhel9"}


@pytest.mark.parametrize("name, machine", MATRIX)
def test_gpu_monitoring_node_exporter_follows_os_and_arch(name, machine):
    values, rendered = os_vars("gpu_monitoring", name, machine)
    el = OS_ROWS[name][3] == "RedHat"
    # No node_exporter package in EL9's base repositories: the release tarball; Debian/Ubuntu package it.
    assert values["__gpu_monitoring_node_exporter_install_auto"] == ("tarball" if el else "package")
    assert values["__gpu_monitoring_node_exporter_env_file"] == (
        "/etc/sysconfig/prometheus-node-exporter" if el else "/etc/default/prometheus-node-exporter")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[machine]
    assert rendered["__gpu_monitoring_ne_tarball_url"] == (
        "https://github.com/prometheus/node_exporter/releases/download/v1.9.1/node_exporter-1.9.1.linux-%s.tar.gz" % arch)
    assert rendered["__gpu_monitoring_ne_release_dir"] == "/opt/node_exporter/node_exporter-1.9.1.linux-" + arch


@pytest.mark.parametrize("name, machine", MATRIX)
def test_gpu_monitoring_tarball_checksum_per_architecture(name, machine):
    gpufleet_node = node(name, machine)
    found = resolve_os_vars("gpu_monitoring", gpufleet_node)
    sums = {"amd64": "1" * 64, "arm64": "sha256:" + "2" * 64}
    rendered = role_vars("gpu_monitoring", gpufleet_node, found, gpu_monitoring_node_exporter_tarball_checksum=sums)
    assert rendered["__gpu_monitoring_ne_tarball_checksum"] == ("1" * 64 if machine == "x86_64" else "2" * 64)
    # An explicit URL stays as given on every architecture.
    mirror = "https://mirror.example/node_exporter-1.9.1.linux-arm64.tar.gz"
    rendered = role_vars("gpu_monitoring", gpufleet_node, found, gpu_monitoring_node_exporter_tarball_url=mirror)
    assert rendered["__gpu_monitoring_ne_tarball_url"] == mirror


@pytest.mark.parametrize("name, machine", MATRIX)
@pytest.mark.parametrize("branch, package", [
    ("580", "datacenter-gpu-manager-4-cuda13"), ("590", "datacenter-gpu-manager-4-cuda13"),
    ("570", "datacenter-gpu-manager-4-cuda12"), ("550", "datacenter-gpu-manager-4-cuda12"),
    ("535", "datacenter-gpu-manager-4-cuda12"),
])
def test_gpu_monitoring_dcgm_package_follows_the_driver_branch(name, machine, branch, package):
    gpufleet_node = node(name, machine)
    found = resolve_os_vars("gpu_monitoring", gpufleet_node)
    assert role_vars("gpu_monitoring", gpufleet_node, found, gpufleet_driver_branch=branch)["gpu_monitoring_dcgm_package"] == package


def test_gpu_monitoring_dcgm_defaults_and_overrides():
    gpufleet_node = node("debian-13", "x86_64")
    found = resolve_os_vars("gpu_monitoring", gpufleet_node)
    nvidia_default = role_vars("nvidia_driver", gpufleet_node)["nvidia_driver_branch"]
    # Without nvidia_driver in the play, the same branch as nvidia_driver's default (the shared one).
    assert role_vars("gpu_monitoring", gpufleet_node, found)["gpu_monitoring_dcgm_package"] == (
        "datacenter-gpu-manager-4-cuda%d" % dcgm.cuda_major_for_branch(nvidia_default))
    assert role_vars("gpu_monitoring", gpufleet_node, found, gpufleet_driver_branch="580",
                     gpu_monitoring_dcgm_cuda_major="12")["gpu_monitoring_dcgm_package"] == "datacenter-gpu-manager-4-cuda12"
    # The old name of the override is still read.
    assert role_vars("gpu_monitoring", gpufleet_node, found, gpufleet_driver_branch="580",
                     gpu_monitoring_cuda_major=12)["gpu_monitoring_dcgm_package"] == "datacenter-gpu-manager-4-cuda12"


def shared_cuda_source(name, machine, **extra):
    """The URL NVIDIA's CUDA source gets when gpu_monitoring includes nvidia_driver's cuda_repository: gpu_monitoring
    hands over its URL (vars/main.yml), nvidia_driver's vars/main.yml turns an empty one into NVIDIA's default."""
    gpufleet_node = node(name, machine)
    os_vars_file = resolve_os_vars("gpu_monitoring", gpufleet_node)
    monitoring = role_vars("gpu_monitoring", gpufleet_node, os_vars_file, **extra)
    include = next(task for task in load_yaml(ROLES, "gpu_monitoring", "tasks", "dcgm.yml")
                   if (task.get("ansible.builtin.include_role") or {}).get("tasks_from") == "cuda_repository")
    # The include's own variables, as gpu_monitoring renders them after the set_fact that resolves the source URL.
    monitoring.layers.append({"__gpu_monitoring_dcgm_source_url": monitoring["gpu_monitoring_dcgm_repo_url"],
                              "__gpu_monitoring_dcgm_source_key_url": monitoring["gpu_monitoring_dcgm_repo_key_url"]})
    handed = {var: monitoring.render(value) for var, value in include["vars"].items()}
    driver = role_vars("nvidia_driver", gpufleet_node, None, **dict(extra, **handed))
    return handed["nvidia_driver_repo_url"], driver["__nvidia_driver_cuda_repo"]


@pytest.mark.parametrize("name, machine", MATRIX)
def test_dcgm_uses_the_one_cuda_source_for_this_os_and_arch(name, machine):
    handed, url = shared_cuda_source(name, machine)
    # Nothing of its own: the shared gpufleet_cuda_repo_url the driver uses too, so both roles write the same entry.
    assert handed == ""
    assert url == "https://developer.download.nvidia.com/compute/cuda/repos/%s/%s" % (
        CUDA_DISTRO[name], "sbsa" if machine == "aarch64" else "x86_64")


@pytest.mark.parametrize("name, machine", MATRIX)
def test_dcgm_repo_overrides(name, machine):
    # A site mirror given to both roles (the shared setting) is what DCGM uses too.
    handed, url = shared_cuda_source(name, machine, gpufleet_cuda_repo_url="https://mirror.example/cuda/rhel9/sbsa")
    assert url == "https://mirror.example/cuda/rhel9/sbsa"
    assert role_vars("nvidia_driver", node(name, machine), gpufleet_cuda_repo_url="https://mirror.example/cuda/rhel9/sbsa")[
        "__nvidia_driver_cuda_repo"] == url
    # gpu_monitoring_dcgm_repo_url replaces the shared source's URL.
    handed, url = shared_cuda_source(name, machine, gpu_monitoring_dcgm_repo_url="https://mirror.example/cuda/")
    assert (handed, url) == ("https://mirror.example/cuda/", "https://mirror.example/cuda")
    # An explicit architecture directory wins over gpufleet_node.machine: gpu_monitoring hands it to the driver,
    # which builds the URL (gpu_monitoring builds none of its own).
    handed, url = shared_cuda_source(name, machine, gpu_monitoring_dcgm_repo_arch="x86_64")
    assert handed == ""
    assert url == "https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64" % CUDA_DISTRO[name]
    _unused, url = shared_cuda_source(name, machine, gpu_monitoring_dcgm_repo_arch="sbsa")
    assert url.endswith("/%s/sbsa" % CUDA_DISTRO[name])


def test_gpu_monitoring_no_longer_defines_its_own_cuda_source():
    text = open(os.path.join(ROLES, "gpu_monitoring", "tasks", "dcgm.yml")).read()
    tasks = load_yaml(ROLES, "gpu_monitoring", "tasks", "dcgm.yml")
    assert not [t for t in tasks if "ansible.builtin.deb822_repository" in t or "ansible.builtin.yum_repository" in t]
    include = [t for t in tasks if "ansible.builtin.include_role" in t][0]
    assert include["ansible.builtin.include_role"] == {"name": "gpufleet.cluster.nvidia_driver",
                                                       "tasks_from": "cuda_repository"}
    assert set(include["vars"]) == {"nvidia_driver_repo_url", "nvidia_driver_repo_key_url", "nvidia_driver_repo_arch"}
    # No URL of NVIDIA's repository is built here: the driver role builds it.
    assert "developer.download.nvidia.com" not in open(os.path.join(ROLES, "gpu_monitoring", "vars", "main.yml")).read()
    # Upgraded nodes lose the old DCGM-only entry that conflicts with gpufleet-nvidia-cuda.
    assert "/etc/apt/sources.list.d/gpufleet-cuda-dcgm.sources" in text
    assert "/etc/yum.repos.d/gpufleet-cuda-dcgm.repo" in text


# ---- the nvidia_driver role ---------------------------------------------------------------------------------------

def driver_os_vars(name, machine):
    """nvidia_driver's OS vars file (its first_found list lives in tasks/main.yml like the other roles')."""
    gpufleet_node = node(name, machine)
    found = resolve_os_vars("nvidia_driver", gpufleet_node)
    assert found, "nvidia_driver finds no OS vars file for %s" % name
    return load_yaml(found), role_vars("nvidia_driver", gpufleet_node, found)


@pytest.mark.parametrize("name, machine", MATRIX)
def test_nvidia_driver_plan_per_os_and_machine(name, machine):
    from ansible_collections.gpufleet.cluster.plugins.module_utils import driver_state, nvidia_driver

    source, branch, packages, kernel, headers_meta = DRIVER_ROWS[name]
    found, _unused = driver_os_vars(name, machine)
    assert found["__nvidia_driver_os_source"] == source
    summary = node(name, machine)["os"]
    plan = nvidia_driver.driver_plan(summary["family"], summary["id"], source, branch, "open")
    assert plan["packages"] == packages
    release = kernel.format(arch=DEBIAN_ARCH[machine], machine=machine)
    headers = driver_state.headers_packages(summary["family"], summary["id"], release)
    assert headers_meta.format(arch=DEBIAN_ARCH[machine]) in headers
    if summary["family"] == "Debian":
        assert headers[0] == "linux-headers-" + release


@pytest.mark.parametrize("name, machine", [(n, m) for n, m in MATRIX if DRIVER_ROWS[n][0] == "cuda"])
def test_nvidia_driver_cuda_repository_follows_os_and_machine(name, machine):
    _unused, rendered = driver_os_vars(name, machine)
    url = rendered["__nvidia_driver_cuda_repo"]
    assert url == "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/" + (
        "sbsa" if machine == "aarch64" else "x86_64")


@pytest.mark.parametrize("name", sorted(OS_ROWS))
def test_nvidia_driver_fabric_packages_on_an_hgx_node(name):
    from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_driver

    summary = node(name, "x86_64")["os"]
    source = DRIVER_ROWS[name][0]
    if source == "debian":
        with pytest.raises(ValueError, match="Debian does not package NVIDIA Fabric Manager"):
            nvidia_driver.driver_plan(summary["family"], summary["id"], source, "550", "open", fabricmanager=True)
        return
    plan = nvidia_driver.driver_plan(summary["family"], summary["id"], source, "580", "open", fabricmanager=True,
                                     fabric="nvlink5")
    names = [p["name"] for p in plan["fabric_packages"]]
    expected = {"ubuntu": ["nvidia-fabricmanager-580", "libnvidia-nscq-580", "nvlsm"],
                "cuda": ["nvidia-fabric-manager", "libnvidia-nscq", "nvlsm"]}[source]
    assert names == expected
