"""execution-environment.yml: `make ee` (scripts/ee-context.sh) builds the collection and lays out the ansible-builder
build context; these tests read what is in it. Building the image needs a base image from a registry (see
docs/awx.md); scripts/ee-image-check.sh builds it on a local Debian base where Docker and the node image are at hand.
"""
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest
import yaml
from bindep.depends import Depends

from conftest import ROOT

BIN = os.path.dirname(sys.executable)


def _pins(path):
    """name -> 'name==version' for the pinned lines of a pip requirements file."""
    pins = {}
    with open(path) as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^]]*\])?==(\S+)$", line)
            if match:
                pins[match.group(1).lower()] = "%s==%s" % (match.group(1), match.group(3))
    return pins


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ee") / "context")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    made = subprocess.run([os.path.join(ROOT, "scripts", "ee-context.sh"), path], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    return path


@pytest.fixture(scope="module")
def galaxy():
    return _load(os.path.join(ROOT, "galaxy.yml"))


@pytest.fixture(scope="module")
def containerfile(context):
    with open(os.path.join(context, "Containerfile")) as handle:
        return handle.read()


def test_containerfile_takes_the_base_image_as_a_build_argument(containerfile):
    assert 'ARG EE_BASE_IMAGE="registry.example/ansible/ee-minimal:latest"' in containerfile
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile
    # No other registry is named anywhere in the build.
    assert re.findall(r"^FROM (\S+)", containerfile, re.M) == ["$EE_BASE_IMAGE", "base", "base", "base"]


def test_ansible_core_and_runner_are_the_versions_requirements_txt_pins(containerfile):
    pins = _pins(os.path.join(ROOT, "requirements.txt"))
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M).group(1).split()
    assert refs == [pins["ansible-core"], pins["ansible-runner"]]


def test_galaxy_requirements_are_the_collections_galaxy_yml_depends_on(context, galaxy):
    built = _load(os.path.join(context, "_build", "requirements.yml"))
    assert built == _load(os.path.join(ROOT, "requirements.yml"))
    assert {c["name"]: c["version"] for c in built["collections"]} == galaxy["dependencies"]


def test_the_collection_goes_in_after_its_dependencies_and_is_checked_before_the_user_switch(containerfile):
    lines = containerfile.splitlines()
    requirements = next(i for i, line in enumerate(lines) if "collection install" in line and "-r requirements.yml" in line)
    tarball = next(i for i, line in enumerate(lines)
                   if "collection install" in line and "/build/collection/gpufleet-cluster-*.tar.gz" in line)
    finalize = lines.index("RUN sh /tmp/gpufleet-finalize.sh /tmp/gpufleet-ee-bin && "
                           "rm -rf /tmp/gpufleet-ee-bin /tmp/gpufleet-finalize.sh")
    assert requirements < tarball < lines.index("# Final build stage") < finalize < lines.index("USER 1000")


def test_context_holds_this_collection_built_from_the_checkout(context, galaxy):
    tarballs = os.listdir(os.path.join(context, "_build", "collection"))
    assert tarballs == ["gpufleet-cluster-%s.tar.gz" % galaxy["version"]]
    with tarfile.open(os.path.join(context, "_build", "collection", tarballs[0])) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == ("gpufleet", "cluster", galaxy["version"])
    assert info["dependencies"] == galaxy["dependencies"]
    for needed in ["meta/execution-environment.yml", "meta/ee-requirements.txt", "meta/ee-bindep.txt",
                   "meta/runtime.yml", "plugins/modules/node_facts.py", "roles/validate/tasks/ssh_audit.yml"]:
        assert needed in names
    assert not [n for n in names if n.startswith(("ee/bin/", "build/", ".venv", ".cache/"))]


def _introspect(context, tmp_path, tarball_filter=None):
    """Run the build context's own introspect.py over the collection extracted as the builder stage sees it."""
    target = tmp_path / "ansible_collections" / "gpufleet" / "cluster"
    target.mkdir(parents=True)
    collection = os.path.join(context, "_build", "collection")
    with tarfile.open(os.path.join(collection, os.listdir(collection)[0])) as tar:
        members = [m for m in tar.getmembers() if tarball_filter is None or tarball_filter(m.name)]
        tar.extractall(target, members=members, filter="data")
    out = subprocess.run([sys.executable, os.path.join(context, "_build", "scripts", "introspect.py"), "introspect",
                          str(tmp_path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_image_gets_the_controller_side_dependencies_and_not_the_dev_tools(context, tmp_path):
    found = _introspect(context, tmp_path)
    python = [line.split("#")[0].strip() for line in found["python"]]
    assert python == [_pins(os.path.join(ROOT, "requirements.txt"))["ssh-audit"]]
    system = [line.split("#")[0].strip() for line in found["system"]]
    assert system == ["openssh-client [platform:dpkg]", "openssh-clients [platform:rpm]"]


def test_without_the_meta_file_the_builder_would_take_the_dev_requirements(context, tmp_path):
    """The control case: ansible-builder falls back to the collection's requirements.txt; its own exclusions drop
    molecule and ansible-lint but not the molecule docker driver or testinfra."""
    found = _introspect(context, tmp_path, lambda name: name != "meta/execution-environment.yml")
    python = [line.split("#")[0].strip() for line in found["python"]]
    assert any(p.startswith("molecule-plugins") for p in python)
    assert any(p.startswith("pytest-testinfra") for p in python)


@pytest.mark.parametrize("profiles, package", [
    (["platform:dpkg", "platform:debian"], "openssh-client"),
    (["platform:rpm", "platform:redhat"], "openssh-clients"),
])
def test_bindep_names_the_ssh_client_of_each_package_family(profiles, package):
    with open(os.path.join(ROOT, "meta", "ee-bindep.txt")) as handle:
        depends = Depends(handle.read())
    assert [rule[0] for rule in depends.active_rules(profiles)] == [package]


def test_operator_binary_drop_and_finalize_script_are_in_the_context(context):
    shipped = sorted(os.listdir(os.path.join(context, "_build", "bin")))
    assert shipped == sorted(os.listdir(os.path.join(ROOT, "ee", "bin")))
    assert "README.md" in shipped
    finalize = os.path.join(context, "_build", "gpufleet", "finalize.sh")
    assert subprocess.run(["sh", "-n", finalize], check=False).returncode == 0
