"""Every molecule scenario's node containers come from one definition: .config/molecule/config.yml's
gpufleet_molecule_node, laid under each platform by the molecule_yml override there (scripts/lab.py reads it too).

The override is rendered here with Ansible's own templating, as the docker driver's create playbook sees it."""
import glob
import json
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from conftest import ROOT

BASE = os.path.join(ROOT, ".config", "molecule", "config.yml")
SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml")))
# What a scenario's platform may say about its node: who it is, where it sits, and another image or extra mounts.
PLATFORM_KEYS = {"name", "groups", "networks", "docker_networks", "network_mode", "image", "volumes"}


def base_vars():
    with open(BASE) as stream:
        return yaml.safe_load(stream)["provisioner"]["inventory"]["group_vars"]["all"]


def scenario(path):
    with open(path) as stream:
        return yaml.safe_load(stream)


def created_platforms(tmp_path, config):
    """The platforms the docker driver creates for a scenario whose merged molecule.yml is ``config``."""
    variables = base_vars()
    merged = tmp_path / "molecule.yml"
    merged.write_text(json.dumps(config))
    templar = Templar(loader=DataLoader(), variables=dict(variables, molecule_file=str(merged)))
    rendered = templar.template(trust_as_template(variables["molecule_yml"]))
    return json.loads(json.dumps(rendered["platforms"]))


def test_every_scenario_is_checked():
    assert len(SCENARIOS) == 11


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: os.path.basename(os.path.dirname(path)))
def test_scenario_platforms_add_only_what_differs(path):
    node = base_vars()["gpufleet_molecule_node"]
    for platform in scenario(path)["platforms"]:
        assert set(platform) <= PLATFORM_KEYS, (platform["name"], sorted(set(platform) - PLATFORM_KEYS))
        repeated = sorted(key for key in platform if key != "name" and platform[key] == node.get(key))
        assert not repeated, "%s repeats %s from gpufleet_molecule_node" % (platform["name"], repeated)
        # A platform with its own mounts still gets the cgroup tree systemd needs.
        assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in platform.get("volumes", node["volumes"]), platform["name"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: os.path.basename(os.path.dirname(path)))
def test_created_containers_are_systemd_nodes(tmp_path, path):
    config = scenario(path)
    created = created_platforms(tmp_path, config)
    assert [item["name"] for item in created] == [item["name"] for item in config["platforms"]]
    for item, platform in zip(created, config["platforms"]):
        assert item["command"] == "/lib/systemd/systemd" and item["override_command"] is False
        assert item["capabilities"] == ["SYS_ADMIN", "NET_ADMIN", "NET_RAW"]
        assert item["cgroupns_mode"] == "host" and item["tmpfs"] == ["/run", "/run/lock"]
        assert item["keep_volumes"] is False
        # The platform's own keys win over the shared definition.
        for key, value in platform.items():
            assert item[key] == value, (platform["name"], key)


def test_platform_keys_replace_the_defaults(tmp_path):
    created = created_platforms(tmp_path, {"platforms": [
        {"name": "a"},
        {"name": "b", "image": "gpufleet-node:bookworm", "volumes": ["/sys/fs/cgroup:/sys/fs/cgroup:rw"]}]})
    assert created[0]["image"] == "${GPUFLEET_NODE_IMAGE:-gpufleet-node:trixie}"  # molecule interpolates it
    assert created[0]["volumes"] == ["/sys/fs/cgroup:/sys/fs/cgroup:rw", "/var/lib/docker"]
    assert created[1]["image"] == "gpufleet-node:bookworm"
    assert created[1]["volumes"] == ["/sys/fs/cgroup:/sys/fs/cgroup:rw"]
