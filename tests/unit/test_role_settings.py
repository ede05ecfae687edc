"""One owner per setting: a role reads another role's setting through lookup('gpufleet.cluster.setting'), never by
repeating its default, and the lookup gives what the owner works with."""
import os
import re

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpufleet.cluster.plugins.lookup import setting
from conftest import ROOT, yaml_strings

ROLES = sorted(entry for entry in os.listdir(os.path.join(ROOT, "roles"))
               if os.path.isdir(os.path.join(ROOT, "roles", entry)))
THROUGH_LOOKUP = re.compile(r"""(lookup|query)\(\s*['"]gpufleet\.cluster\.setting['"]\s*,\s*['"][a-z0-9_]+['"]\s*\)""")
NAME = re.compile(r"(?<![\w.'\"])([a-z][a-z0-9_]*)")
CONDITIONS = ("when", "until", "failed_when", "changed_when", "loop")


def lookup(*names, **variables):
    loader = DataLoader()
    return setting.LookupModule(loader=loader, templar=Templar(loader=loader)).run(list(names), variables=variables)


def owner(name):
    return setting.owner_of(name, os.path.join(ROOT, "roles"))


def load(*parts):
    path = os.path.join(ROOT, "roles", *parts)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def expressions(value):
    """Jinja in a YAML value: templated strings, and conditions (bare expressions)."""
    for key, text in yaml_strings(value):
        if "{{" in text or "{%" in text or key in CONDITIONS:
            yield text


def foreign_names(role, texts):
    """Names owned by another role that a text reads other than through the lookup."""
    found = set()
    for text in texts:
        for match in NAME.finditer(THROUGH_LOOKUP.sub("", text)):
            name = match.group(1)
            if owner(name) not in (None, role):
                found.add(name)
    return found


def settings_of(role):
    return set(load(role, "defaults", "main.yml")) | set(load(role, "vars", "main.yml"))


# ---- the lookup ----

def test_an_unset_setting_is_the_owners_default():
    assert lookup("image_security_launcher_path", "interconnect_hostfile_path") == [
        load("image_security", "defaults", "main.yml")["image_security_launcher_path"],
        load("interconnect", "defaults", "main.yml")["interconnect_hostfile_path"]]


def test_the_inventorys_value_wins_over_the_default():
    assert lookup("ssh_hardening_port", ssh_hardening_port=2222) == [2222]


def test_a_templated_default_is_templated_with_the_plays_variables():
    # image_security_image defaults to gpufleet_image; the training user to gpufleet_training_user.
    assert lookup("image_security_image", gpufleet_image="registry.example/train:1") == ["registry.example/train:1"]
    assert lookup("image_security_image") == [""]
    assert lookup("cluster_ssh_user", gpufleet_training_user="trainer") == ["trainer"]


def test_a_derived_value_is_the_owners_own_derivation():
    # interconnect_peermem false (deprecated) still means no GPUDirect RDMA: the owner decides, not the reader.
    assert lookup("interconnect_gpudirect_preference") == ["auto"]
    assert lookup("interconnect_gpudirect_preference", interconnect_gpudirect="dmabuf") == ["dmabuf"]
    assert lookup("interconnect_gpudirect_preference", interconnect_peermem=False) == ["none"]
    assert lookup("gpu_monitoring_scrape_user", gpu_monitoring_web_basic_auth_users={"prom": "$2y$hash"}) == ["prom"]
    assert lookup("gpu_monitoring_scrape_user", gpu_monitoring_scrape_username="scraper",
                  gpu_monitoring_web_basic_auth_users={"prom": "$2y$hash"}) == ["scraper"]
    assert lookup("gpu_monitoring_scheme") == ["http"]
    assert lookup("gpu_monitoring_scheme", gpu_monitoring_web_tls_cert="-----BEGIN CERTIFICATE-----") == ["https"]


# Through ansible-core's plugin loader, as a play calls it: a process of its own with the collection finder over this
# checkout (installing the finder here would change how the other test modules import ansible_collections).
CALLER = r"""
import json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
variables = json.loads(sys.argv[3])
print(json.dumps(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(sys.argv[2]))))
"""


def through_ansible(expression, **variables):
    import json
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", CALLER, os.path.join(ROOT, "collections"), expression,
                           json.dumps(variables)], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout)


def test_the_verify_key_is_the_key_text_or_the_controller_file(tmp_path):
    key = tmp_path / "fleet.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nfile\n-----END PUBLIC KEY-----\n")
    expression = "{{ lookup('gpufleet.cluster.setting', 'image_security_verify_key') }}"
    assert through_ansible(expression) == ""
    assert through_ansible(expression, image_security_cosign_public_key_file=str(key)).startswith(
        "-----BEGIN PUBLIC KEY-----\nfile")
    assert through_ansible(expression, image_security_cosign_public_key="inline",
                           image_security_cosign_public_key_file=str(key)) == "inline"


@pytest.mark.parametrize("name, message", [
    ("image_security_launcher_pth", "is not a setting of the image_security role"),
    ("__interconnect_profile_script", "belongs to no role"),
    ("gpufleet_image", "belongs to no role"),
])
def test_a_name_the_owner_does_not_have_fails(name, message):
    with pytest.raises(AnsibleError, match=message):
        lookup(name)


def test_the_owner_is_the_longest_role_name():
    assert setting.owner_of("nvidia_container_toolkit_cdi") == "nvidia_container_toolkit"
    assert setting.owner_of("nvidia_driver_branch") == "nvidia_driver"


# ---- the rule, over every role ----

@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_vars_read_other_roles_only_through_the_lookup(role):
    texts = list(expressions(load(role, "defaults", "main.yml"))) + list(expressions(load(role, "vars", "main.yml")))
    for spec in load(role, "meta", "argument_specs.yml").get("argument_specs", {}).values():
        for option in (spec.get("options") or {}).values():
            texts += list(expressions(option.get("default")))
    assert not foreign_names(role, texts), (
        "roles/%s repeats another role's setting; read it with lookup('gpufleet.cluster.setting', name)" % role)


@pytest.mark.parametrize("role", ROLES)
def test_tasks_read_other_roles_settings_only_through_the_lookup(role):
    """A task may read what another role's tasks set (preflight_packages, validate_verdict): those are its results.
    What another role has in its defaults or vars is a setting, and goes through the lookup."""
    texts = []
    for folder in ("tasks", "handlers"):
        base = os.path.join(ROOT, "roles", role, folder)
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if name.endswith(".yml"):
                texts += list(expressions(load(role, folder, name)))
    settings = [name for name in foreign_names(role, texts) if name in settings_of(owner(name))]
    assert not settings, "roles/%s/tasks read %s directly" % (role, ", ".join(sorted(settings)))


def test_the_rule_catches_a_repeated_default():
    assert foreign_names("validate", ["{{ image_security_launcher_path | default('/usr/local/bin/x') }}"]) == {
        "image_security_launcher_path"}
    assert foreign_names("validate", ["{{ lookup('gpufleet.cluster.setting', 'image_security_launcher_path') }}"]) == set()
