"""One precedence engine, Ansible's: a setting more than one role reads is declared once, in roles/gpufleet_defaults,
which every role that reads one depends on. No role defines another role's variable or a shared one, no role reads
another role's setting, and the derived shared values are what the roles worked them out to be."""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import COLLECTIONS, ROOT, yaml_strings

SHARED = "gpufleet_defaults"
SHARED_PREFIX = "gpufleet_"
ROLES = sorted(entry for entry in os.listdir(os.path.join(ROOT, "roles"))
               if os.path.isdir(os.path.join(ROOT, "roles", entry)))
NAME = re.compile(r"(?<![\w.'\"])([a-z][a-z0-9_]*)")
CONDITIONS = ("when", "until", "failed_when", "changed_when", "loop", "that")


def load(*parts):
    path = os.path.join(ROOT, "roles", *parts)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def var_files(role):
    """defaults/main.yml and every vars/*.yml of a role (relative to the role)."""
    found = [("defaults", "main.yml")] if os.path.exists(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) else []
    folder = os.path.join(ROOT, "roles", role, "vars")
    found += [("vars", name) for name in sorted(os.listdir(folder)) if name.endswith(".yml")] if os.path.isdir(folder) else []
    return found


def owner(name):
    """The role a variable name belongs to: the role whose name followed by _ is its longest prefix (after the
    internal marker __), gpufleet_defaults for the shared gpufleet_ prefix, else None."""
    bare = name[2:] if name.startswith("__") else name
    owners = [role for role in ROLES if bare.startswith(role + "_")]
    if owners:
        return max(owners, key=len)
    return SHARED if bare.startswith(SHARED_PREFIX) else None


def settings_of(role):
    """What a role declares: the names of its defaults and vars files."""
    names = set()
    for parts in var_files(role):
        names |= set(load(role, *parts))
    return names


SHARED_SETTINGS = settings_of(SHARED)
FOREIGN = dict((name, role) for role in ROLES if role != SHARED for name in settings_of(role))


def expressions(value):
    """Jinja in a YAML value: templated strings, and conditions (bare expressions)."""
    for key, text in yaml_strings(value):
        if "{{" in text or "{%" in text or key in CONDITIONS:
            yield text


def role_texts(role):
    """(where, text) of every expression a role evaluates: its defaults and vars, its spec defaults, its tasks and
    handlers, its templates."""
    for parts in var_files(role):
        for text in expressions(load(role, *parts)):
            yield "/".join(parts), text
    for entry, spec in (load(role, "meta", "argument_specs.yml").get("argument_specs") or {}).items():
        for option in (spec.get("options") or {}).values():
            for text in expressions(option.get("default")):
                yield "meta/argument_specs.yml (%s)" % entry, text
    for folder in ("tasks", "handlers"):
        base = os.path.join(ROOT, "roles", role, folder)
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if name.endswith(".yml"):
                for text in expressions(load(role, folder, name)):
                    yield "%s/%s" % (folder, name), text
    base = os.path.join(ROOT, "roles", role, "templates")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        with open(os.path.join(base, name)) as handle:
            yield "templates/" + name, "".join(re.findall(r"\{\{.*?\}\}|\{%.*?%\}", handle.read(), re.S))


def names_in(text):
    return set(match.group(1) for match in NAME.finditer(text))


# ---- the rule, over every role ----

def test_the_roles_are_found():
    assert SHARED in ROLES and len(ROLES) >= 14
    assert {"gpufleet_training_user", "gpufleet_ssh_port", "gpufleet_launcher_path"} <= SHARED_SETTINGS


@pytest.mark.parametrize("role", ROLES)
def test_a_role_defines_only_its_own_variables(role):
    """No role's defaults/ or vars/ define a variable named after another role, or a shared gpufleet_ setting: that
    would be a second declaration of it, winning or losing against the first by where the roles run."""
    wrong = ["%s: %s (%s)" % ("/".join(parts), name, owner(name) or "no role's prefix")
             for parts in var_files(role) for name in load(role, *parts) if owner(name) != role]
    assert not wrong, "roles/%s defines variables that are not its own: %s" % (role, "; ".join(wrong))


@pytest.mark.parametrize("role", [role for role in ROLES if role != SHARED])
def test_a_role_reads_another_roles_setting_only_through_the_shared_role(role):
    """What another role declares in its defaults or vars is that role's setting; a role that needs it reads the
    shared gpufleet_ setting both default to. (Keys handed to an include_role are that role's inputs, not reads; a
    fact another role's tasks set, such as preflight_packages, is its result.)"""
    read = ["%s: %s (%s)" % (where, name, FOREIGN[name]) for where, text in role_texts(role)
            for name in sorted(names_in(text)) if FOREIGN.get(name, role) != role]
    assert not read, "roles/%s reads other roles' settings: %s" % (role, "; ".join(read))


@pytest.mark.parametrize("role", [role for role in ROLES if role != SHARED])
def test_a_role_that_reads_a_shared_setting_depends_on_the_shared_role(role):
    used = sorted(set(name for _where, text in role_texts(role) for name in names_in(text)) & SHARED_SETTINGS)
    dependencies = [entry.get("role", entry.get("name")) if isinstance(entry, dict) else entry
                    for entry in load(role, "meta", "main.yml").get("dependencies") or []]
    if used:
        assert dependencies == ["gpufleet.cluster." + SHARED], (
            "roles/%s reads %s: list gpufleet.cluster.%s under dependencies in its meta/main.yml"
            % (role, ", ".join(used), SHARED))
    else:
        assert dependencies == [], role


def test_the_shared_role_costs_nothing_at_run_time():
    """Defaults only: no tasks, handlers or vars of its own, and no `main` argument spec (Ansible would add an
    argument check task to every play that loads it)."""
    base = os.path.join(ROOT, "roles", SHARED)
    assert sorted(os.listdir(base)) == ["README.md", "defaults", "meta"]
    assert "main" not in load(SHARED, "meta", "argument_specs.yml")["argument_specs"]
    assert load(SHARED, "meta", "main.yml")["dependencies"] == []


def test_the_shared_settings_are_every_gpufleet_name_with_a_default():
    """A gpufleet_ name a role reads with a default of its own would be a second declaration of the default. The only
    gpufleet_ names read with default() are the per-host ones roles read for other hosts through hostvars, which
    hold the inventory and not role defaults."""
    per_host = {"gpufleet_cluster_address", "gpufleet_node_addresses", "gpufleet_gpus_per_node"}
    with_default = re.compile(r"\b(gpufleet_[a-z0-9_]+)\s*\|\s*(?:default|d)\(")
    found = set()
    for role in ROLES:
        for _where, text in role_texts(role):
            found |= set(with_default.findall(text))
    assert found <= per_host, sorted(found - per_host)
    assert not per_host & SHARED_SETTINGS


# ---- the removed lookup ----

SKIP_DIRS = {".git", ".venv", ".cache", ".lab", ".ansible", "__pycache__", ".pytest_cache", "reports", "build"}
# The changelog records that it was added and removed; this file names it to look for it.
SKIP_FILES = {os.path.join(ROOT, "CHANGELOG.md"), os.path.abspath(__file__)}
REMOVED = re.compile(r"gpufleet\.cluster\.setting\b|plugins/lookup/setting|lookup\(\s*['\"]setting['\"]")


def test_no_file_references_the_removed_lookup():
    assert not os.path.exists(os.path.join(ROOT, "plugins", "lookup", "setting.py"))
    found = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [name for name in dirs if name not in SKIP_DIRS]
        for name in names:
            path = os.path.join(folder, name)
            if path in SKIP_FILES or os.path.islink(path):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except (UnicodeDecodeError, OSError):
                continue
            if REMOVED.search(text):
                found.append(os.path.relpath(path, ROOT))
    assert found == []


# ---- the values, as Ansible works them out ----

# Rendered with ansible-core's Templar over the shared defaults, then the role's, then the given variables (inventory
# values), in a process of its own with the collection finder over this checkout (installing the finder here would
# change how the other test modules import ansible_collections).
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

request = json.loads(sys.stdin.read())
variables = {}
for layer in request["layers"]:
    variables.update(trusted(layer))
templar = Templar(loader=DataLoader(), variables=variables)
print(json.dumps(dict((name, templar.template(variables[name])) for name in request["names"])))
"""


def resolve(roles, names, **inventory):
    """The values of these names in a play of these roles (and the shared role they depend on)."""
    layers = [load(SHARED, "defaults", "main.yml")]
    for role in roles:
        layers += [load(role, "defaults", "main.yml"), load(role, "vars", "main.yml")]
    layers.append(dict(inventory, playbook_dir="/srv/gpufleet/playbooks"))
    done = subprocess.run([sys.executable, "-c", RENDERER, COLLECTIONS], input=json.dumps({"layers": layers, "names": names}),
                          capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout)


def test_a_shared_setting_moves_every_role_and_a_knob_its_own_role_alone():
    names = ["ssh_hardening_port", "fail2ban_sshd_port", "validate_ssh_port", "os_hardening_nftables_ssh_ports"]
    roles = ["ssh_hardening", "fail2ban", "validate", "os_hardening"]
    assert resolve(roles, names) == {"ssh_hardening_port": 22, "fail2ban_sshd_port": 22, "validate_ssh_port": 22,
                                     "os_hardening_nftables_ssh_ports": [22]}
    assert resolve(roles, names, gpufleet_ssh_port=2222) == {
        "ssh_hardening_port": 2222, "fail2ban_sshd_port": 2222, "validate_ssh_port": 2222,
        "os_hardening_nftables_ssh_ports": [2222, 22]}
    assert resolve(roles, names, ssh_hardening_port=2200) == {
        "ssh_hardening_port": 2200, "fail2ban_sshd_port": 22, "validate_ssh_port": 22,
        "os_hardening_nftables_ssh_ports": [22]}


def test_the_training_user_is_one_setting():
    names = ["cluster_ssh_user", "ssh_hardening_training_user", "interconnect_training_user",
             "image_security_launcher_users", "validate_training_user"]
    roles = ["cluster_ssh", "ssh_hardening", "interconnect", "image_security", "validate"]
    assert resolve(roles, names, gpufleet_training_user="trainer") == {
        "cluster_ssh_user": "trainer", "ssh_hardening_training_user": "trainer", "interconnect_training_user": "trainer",
        "image_security_launcher_users": ["trainer"], "validate_training_user": "trainer"}


def test_derived_shared_values():
    # interconnect_peermem false (deprecated) still means no GPUDirect RDMA, for interconnect and validate alike.
    names = ["gpufleet_gpudirect_preference", "__interconnect_gpudirect_preference", "validate_gpudirect_preference"]
    roles = ["interconnect", "validate"]
    assert set(resolve(roles, names).values()) == {"auto"}
    assert set(resolve(roles, names, gpufleet_gpudirect_method="dmabuf").values()) == {"dmabuf"}
    assert set(resolve(roles, names, interconnect_peermem=False).values()) == {"none"}
    # The exporters' scheme and scrape user: gpu_monitoring's own and the shared ones validate scrapes with.
    names = ["gpufleet_exporter_scheme", "__gpu_monitoring_scheme", "gpufleet_exporter_scrape_user",
             "__gpu_monitoring_scrape_user"]
    assert resolve(["gpu_monitoring"], names) == {"gpufleet_exporter_scheme": "http", "__gpu_monitoring_scheme": "http",
                                                  "gpufleet_exporter_scrape_user": "", "__gpu_monitoring_scrape_user": ""}
    assert resolve(["gpu_monitoring"], names, gpufleet_exporter_tls_cert="-----BEGIN CERTIFICATE-----",
                   gpufleet_exporter_basic_auth_users={"prom": "$2y$hash"}) == {
        "gpufleet_exporter_scheme": "https", "__gpu_monitoring_scheme": "https",
        "gpufleet_exporter_scrape_user": "prom", "__gpu_monitoring_scrape_user": "prom"}
    assert resolve(["gpu_monitoring"], ["gpufleet_exporter_scrape_user"], gpufleet_exporter_scrape_username="scraper",
                   gpufleet_exporter_basic_auth_users={"prom": "$2y$hash"}) == {"gpufleet_exporter_scrape_user": "scraper"}


def test_the_verify_key_is_the_key_text_or_the_controller_file(tmp_path):
    key = tmp_path / "fleet.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nfile\n-----END PUBLIC KEY-----\n")
    names = ["gpufleet_cosign_verify_key", "__image_security_verify_key", "validate_image_key"]
    roles = ["image_security", "validate"]
    assert set(resolve(roles, names).values()) == {""}
    values = resolve(roles, names, gpufleet_cosign_public_key_file=str(key))
    assert len(set(values.values())) == 1 and values["validate_image_key"].startswith("-----BEGIN PUBLIC KEY-----\nfile")
    values = resolve(roles, names, gpufleet_cosign_public_key="inline", gpufleet_cosign_public_key_file=str(key))
    assert set(values.values()) == {"inline"}


def test_the_controller_directories_follow_one_setting():
    names = ["validate_report_root", "interconnect_controller_dir", "gpu_monitoring_targets_dir",
             "image_security_scan_report_dir", "image_build_report_dir"]
    roles = ["validate", "interconnect", "gpu_monitoring", "image_security", "image_build"]
    assert resolve(roles, names) == {
        "validate_report_root": "/srv/gpufleet/reports", "interconnect_controller_dir": "/srv/gpufleet/reports/gpufleet",
        "gpu_monitoring_targets_dir": "/srv/gpufleet/reports/prometheus",
        "image_security_scan_report_dir": "/srv/gpufleet/reports/trivy", "image_build_report_dir": "/srv/gpufleet/reports/images"}
    assert resolve(roles, names, gpufleet_controller_dir="/data", gpufleet_cluster_name="prod")[
        "interconnect_controller_dir"] == "/data/reports/prod"


def test_no_shared_setting_shares_its_name_with_a_fact():
    """A fact (a module's ansible_facts, a set_fact) wins over role defaults: a shared setting of the same name would
    silently take the fact's value on every run after the one that set it (the fact cache keeps it)."""
    facts = set()
    for name in os.listdir(os.path.join(ROOT, "plugins", "modules")):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "plugins", "modules", name)) as handle:
                facts.update(re.findall(r"ansible_facts=\{\"(\w+)\"", handle.read()))
    for role in ROLES:
        for folder, _dirs, names in os.walk(os.path.join(ROOT, "roles", role, "tasks")):
            for name in names:
                tasks = yaml.safe_load(open(os.path.join(folder, name))) or []
                stack = list(tasks)
                while stack:
                    task = stack.pop()
                    if isinstance(task, dict):
                        stack.extend(task.get("block", []) + task.get("rescue", []) + task.get("always", []))
                        facts.update(key for key in (task.get("ansible.builtin.set_fact") or {}) if key != "cacheable")
    assert {"gpufleet_node", "gpufleet_gpudirect", "gpufleet_rdma", "gpufleet_ucx"} <= facts
    shared = set(load("gpufleet_defaults", "defaults", "main.yml"))
    assert shared and not shared & facts, sorted(shared & facts)
