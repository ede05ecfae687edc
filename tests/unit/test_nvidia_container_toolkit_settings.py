"""nvidia_container_toolkit without running it: every variable documented with its default, and the package tasks
pinned and held (tests/integration/test_nvidia_container_toolkit_role.py runs the role with ansible-playbook)."""
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "nvidia_container_toolkit")


def load_yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_every_variable_is_documented_with_its_default():
    defaults = load_yaml("defaults", "main.yml")
    spec = load_yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(spec)
    for name, option in spec.items():
        assert option["default"] == defaults[name], name
        assert option.get("type") and option.get("description"), name


def test_packages_are_pinned_and_held():
    apt_tasks = load_yaml("tasks", "install_apt.yml")
    install = next(t for t in apt_tasks if t["name"] == "Install the container toolkit at the pinned version")
    assert "'=' ~ nvidia_container_toolkit_version ~ '-*'" in install["ansible.builtin.apt"]["name"]
    hold = next(t for t in apt_tasks if "ansible.builtin.dpkg_selections" in t)
    assert hold["loop"] == "{{ nvidia_container_toolkit_packages }}"
    dnf_tasks = load_yaml("tasks", "install_dnf.yml")
    assert any("community.general.dnf_versionlock" in t for t in dnf_tasks)
    repo = next(t for t in apt_tasks if "ansible.builtin.deb822_repository" in t)["ansible.builtin.deb822_repository"]
    assert repo["uris"] == ["{{ nvidia_container_toolkit_repo_url }}/deb/$(ARCH)"]
    assert repo["suites"] == ["/"]
