"""Every role option whose name says it holds a secret is marked no_log in meta/argument_specs.yml.

Ansible prints a failed argument spec validation with the values it checked; no_log keeps a key or password out of
that output and out of the logs. A name that says key, password, passwd, token, secret, passphrase or credential
is a secret unless it is a bool or a number (a switch, never a secret) or it is listed below with why it is not one.
"""
import glob
import os
import re

import pytest
import yaml

from conftest import ROOT

SECRET_WORDS = re.compile(r"key|password|passwd|token|secret|passphrase|credential", re.IGNORECASE)
NOT_SECRET_TYPES = ("bool", "int", "float")

# Option names that say key or password but hold no secret, each with the reason.
NOT_SECRETS = {
    "cluster_ssh_key_dir": "a controller directory path; the key files in it are 0600",
    "cluster_ssh_key_name": "the file name of the key pair, not the key",
    "cluster_ssh_public_key": "a public key, written into authorized_keys on every node",
    "cluster_ssh_authorized_keys_extra": "public keys, written into authorized_keys",
    "cluster_ssh_admin_keys": "public keys, written into the admin user's authorized_keys",
    "container_runtime_docker_repo_key": "the URL (or armoured text) of a public repository signing key",
    "gpu_monitoring_scrape_password_file": "the path on the Prometheus server the password is written to",
    "gpufleet_cuda_repo_key_url": "the URL of a public repository signing key",
    "gpufleet_cosign_public_key": "a cosign public key, the trust anchor every node verifies with",
    "gpufleet_cosign_public_key_file": "the controller path of that public key",
    "gpufleet_cosign_verify_key": "that public key as PEM text",
    "gpu_monitoring_dcgm_repo_key_url": "the URL of a public repository signing key",
    "image_build_cosign_key_file": "the path of the cosign private key on the builder, not the key",
    "image_security_cosign_public_key": "a cosign public key, the trust anchor every node verifies with",
    "image_security_cosign_public_key_file": "the controller path of that public key",
    "image_security_trivy_apt_key_url": "the URL of a public repository signing key",
    "image_security_trivy_rpm_key_url": "the URL of a public repository signing key",
    "interconnect_doca_repo_key_url": "the URL of a public repository signing key",
    "nvidia_container_toolkit_repo_key": "the URL (or armoured text) of a public repository signing key",
    "nvidia_driver_repo_key_url": "the URL of a public repository signing key",
    "nvidia_driver_mok_key_path": "the node path the MOK private key is written to, not the key",
    "ssh_hardening_pubkey_accepted_algorithms": "names of public key signature algorithms",
    "validate_image_key": "the cosign public key the image is verified with",
}


def walk(options, prefix=""):
    for name, option in (options or {}).items():
        yield prefix + name, name, option
        yield from walk(option.get("options"), prefix + name + ".")


def spec_options():
    """(role, entry point, dotted name, option) of every option of every role's argument specs."""
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        role = path.split(os.sep)[-3]
        with open(path) as handle:
            specs = (yaml.safe_load(handle) or {}).get("argument_specs") or {}
        for entry, spec in specs.items():
            for dotted, name, option in walk(spec.get("options")):
                yield role, entry, dotted, name, option


OPTIONS = list(spec_options())


def says_secret(name, option):
    return bool(SECRET_WORDS.search(name)) and option.get("type", "str") not in NOT_SECRET_TYPES


def test_the_walk_finds_the_options():
    names = set(name for _role, _entry, _dotted, name, _option in OPTIONS)
    assert len(names) > 300
    assert {"cluster_ssh_private_key", "gpu_monitoring_web_tls_key", "image_security_launcher_mounts"} <= names


def test_every_option_named_like_a_secret_is_no_log():
    missing = ["%s (%s, %s)" % (dotted, role, entry) for role, entry, dotted, name, option in OPTIONS
               if says_secret(name, option) and not option.get("no_log") and name not in NOT_SECRETS]
    assert missing == [], "mark these no_log: true, or list them in NOT_SECRETS with why they hold no secret"


@pytest.mark.parametrize("name", ["gpu_monitoring_web_tls_key", "gpu_monitoring_scrape_password",
                                  "gpu_monitoring_web_basic_auth_users", "cluster_ssh_private_key",
                                  "image_security_registry_password", "image_build_registry_password",
                                  "image_build_cosign_password", "nvidia_driver_mok_key", "validate_registry_password"])
def test_the_known_secrets_are_no_log(name):
    found = [option for _role, _entry, _dotted, option_name, option in OPTIONS if option_name == name]
    assert found and all(option.get("no_log") for option in found)


def test_the_allow_list_names_real_options_that_are_not_no_log():
    by_name = dict((name, option) for _role, _entry, _dotted, name, option in OPTIONS)
    stale = sorted(name for name in NOT_SECRETS if name not in by_name)
    assert stale == [], "NOT_SECRETS names options no role has"
    needless = sorted(name for name in NOT_SECRETS if not says_secret(name, by_name[name]))
    assert needless == [], "NOT_SECRETS lists names the rule does not catch"
    assert all(reason.strip() for reason in NOT_SECRETS.values())


def test_the_rule_catches_a_new_secret():
    assert says_secret("foo_api_token", {"type": "str"})
    assert says_secret("foo_db_passphrase", {})
    assert says_secret("foo_credentials", {"type": "dict"})
    assert says_secret("foo_signing_key", {"type": "raw"})
    assert not says_secret("foo_keys_exclusive", {"type": "bool"})
    assert not says_secret("foo_name", {"type": "str"})
