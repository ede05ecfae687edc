"""The gpu_monitoring exporters' listen address, web configuration (TLS, basic auth) and Prometheus scrape job
(plugins/filter/file_sd.py), and the flags the node_exporter and dcgm-exporter templates render from them.

dcgm-exporter cannot run here (no GPU, no NVIDIA registry), so its unit file is checked as rendered: the flag
names are dcgm-exporter's own (--address, --web-config-file).
"""

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.filter import file_sd

from conftest import render_role_template

# bcrypt of "molecule-only-secret" (htpasswd -nbBC 10 prometheus molecule-only-secret), as molecule uses it.
HASH = "$2y$10$eP5FK26LJ/FXT5L5KAetgexa7DYbkkpLcmndcVtHM/hUdKgbMcXIi"
ADDRESSES = ["172.17.0.2", "10.231.9.11", "fd00:9::11"]


# --- listen address -------------------------------------------------------------------------------------------

def test_the_monitoring_network_wins():
    assert file_sd.exporter_listen_address(ADDRESSES, monitoring_network="10.231.9.0/24",
                                           cluster_address="172.17.0.2") == "10.231.9.11"
    assert file_sd.exporter_listen_address(ADDRESSES, monitoring_network="fd00:9::/64") == "fd00:9::11"


def test_a_node_without_an_address_in_the_monitoring_network_is_refused():
    with pytest.raises(ValueError, match=r"gpu9 has no address in the monitoring network 192\.0\.2\.0/24.*"
                                         r"172\.17\.0\.2, 10\.231\.9\.11.*Nothing was changed\.$"):
        file_sd.exporter_listen_address(ADDRESSES, monitoring_network="192.0.2.0/24", cluster_address="10.231.9.11",
                                        host="gpu9")


def test_without_a_monitoring_network_the_cluster_address_the_node_holds():
    assert file_sd.exporter_listen_address(ADDRESSES, cluster_address="10.231.9.11") == "10.231.9.11"
    # An ansible_host the node does not hold (NAT, a bastion) is passed over for the cluster network.
    assert file_sd.exporter_listen_address(ADDRESSES, cluster_address="203.0.113.7",
                                           cluster_network="172.17.0.0/16") == "172.17.0.2"
    # A DNS name is not bound to.
    assert file_sd.exporter_listen_address(ADDRESSES, cluster_address="gpu9.example",
                                           cluster_network="10.231.9.0/24") == "10.231.9.11"


@pytest.mark.parametrize("cluster_address, cluster_network", [
    ("", ""), ("gpu9.example", ""), ("203.0.113.7", ""), ("", "192.0.2.0/24")])
def test_nothing_to_bind_to_is_refused_unless_listen_all(cluster_address, cluster_network):
    with pytest.raises(ValueError) as error:
        file_sd.exporter_listen_address(ADDRESSES, cluster_address=cluster_address, cluster_network=cluster_network,
                                        host="gpu9")
    message = str(error.value)
    assert message.startswith("gpu9: the exporters have no address to bind to")
    assert "gpu_monitoring_listen_all: true" in message and "anyone who can reach the node" in message
    assert message.endswith("Nothing was changed.")
    assert file_sd.exporter_listen_address(ADDRESSES, cluster_address=cluster_address, cluster_network=cluster_network,
                                           listen_all=True) == ""


def test_options_are_keywords():
    with pytest.raises(TypeError):
        file_sd.exporter_listen_address(ADDRESSES, "10.231.9.0/24")  # pylint: disable=too-many-function-args
    with pytest.raises(TypeError):
        file_sd.exporter_scrape_config("j", "t.json")  # pylint: disable=too-many-function-args,missing-kwoa


def test_listen_all_is_every_address_even_with_a_network():
    assert file_sd.exporter_listen_address(ADDRESSES, monitoring_network="10.231.9.0/24", listen_all=True) == ""


def test_listen_host_brackets_ipv6():
    assert file_sd.listen_host("fd00:9::11") == "[fd00:9::11]"
    assert file_sd.listen_host("10.0.0.1") == "10.0.0.1"
    assert file_sd.listen_host("") == ""


# --- web configuration ----------------------------------------------------------------------------------------

def test_no_tls_and_no_users_is_no_web_configuration():
    assert file_sd.exporter_web_config("", "", {}) == {}


def test_tls_and_basic_auth_in_exporter_toolkit_form():
    assert file_sd.exporter_web_config("/etc/x/tls.crt", "/etc/x/tls.key", {"prometheus": HASH}) == {
        "tls_server_config": {"cert_file": "/etc/x/tls.crt", "key_file": "/etc/x/tls.key", "min_version": "TLS12"},
        "basic_auth_users": {"prometheus": HASH}}


@pytest.mark.parametrize("users", [
    {"prometheus": "molecule-only-secret"},
    {"prometheus": "$6$salt$" + "a" * 86},
    {"prometheus": HASH[:-1]},
    {"bad:name": HASH},
])
def test_users_need_a_bcrypt_hash_and_a_plain_name(users):
    with pytest.raises(ValueError, match="bcrypt hash.*never a plain password. Nothing was changed."):
        file_sd.exporter_web_config("", "", users)


def test_half_a_tls_pair_is_refused():
    with pytest.raises(ValueError, match="both a certificate and a key"):
        file_sd.exporter_web_config("/etc/x/tls.crt", "", {})


# --- Prometheus scrape job ------------------------------------------------------------------------------------

def test_plain_scrape_job_without_web_configuration():
    assert file_sd.exporter_scrape_config("gpufleet-c1", file_sd_files="/etc/prometheus/targets/c1-exporters.json",
                                          web_config={}) == {
        "scrape_configs": [{"job_name": "gpufleet-c1", "scheme": "http",
                            "file_sd_configs": [{"files": ["/etc/prometheus/targets/c1-exporters.json"]}]}]}


def test_scrape_job_matches_tls_and_basic_auth():
    web = file_sd.exporter_web_config("/c", "/k", {"prometheus": HASH})
    job = file_sd.exporter_scrape_config("j", file_sd_files="t.json", web_config=web,
                                         password_file="/etc/prometheus/pw", ca_file="/etc/prometheus/ca.crt",
                                         server_name="exporters.example")["scrape_configs"][0]
    assert job["scheme"] == "https"
    assert job["tls_config"] == {"ca_file": "/etc/prometheus/ca.crt", "server_name": "exporters.example"}
    assert job["basic_auth"] == {"username": "prometheus", "password_file": "/etc/prometheus/pw"}
    assert HASH not in yaml.safe_dump(job)


def test_scrape_user_must_be_one_of_the_users():
    web = file_sd.exporter_web_config("", "", {"a": HASH, "b": HASH})
    with pytest.raises(ValueError, match="name the one Prometheus scrapes as"):
        file_sd.exporter_scrape_config("j", file_sd_files="t.json", web_config=web, password_file="/pw")
    with pytest.raises(ValueError, match="'c' is not among the exporter users"):
        file_sd.exporter_scrape_config("j", file_sd_files="t.json", web_config=web, username="c", password_file="/pw")
    assert file_sd.exporter_scrape_config("j", file_sd_files="t.json", web_config=web, username="b",
                                          password_file="/pw")["scrape_configs"][0]["basic_auth"]["username"] == "b"
    with pytest.raises(ValueError, match="gpu_monitoring_scrape_password_file"):
        file_sd.exporter_scrape_config("j", file_sd_files="t.json", web_config=web, username="b", password_file="")


# --- templates ------------------------------------------------------------------------------------------------

def render(name, **variables):
    base = dict(
        ansible_managed="Ansible managed", gpu_monitoring_node_exporter_textfile_dir="/var/lib/gpufleet/textfile",
        gpu_monitoring_node_exporter_extra_args=[], __gpu_monitoring_web_config_file="/etc/gpufleet-exporters/web-config.yml",
        __gpu_monitoring_web_dir="/etc/gpufleet-exporters", gpu_monitoring_dcgm_exporter_tag="t",
        gpu_monitoring_dcgm_exporter_condition_path="/dev/nvidiactl", __gpu_monitoring_use_hostengine=False,
        gpu_monitoring_dcgm_exporter_docker_bin="/usr/bin/docker", gpu_monitoring_dcgm_exporter_profiling=False,
        __gpu_monitoring_dcgm_exporter_conf_dir="/etc/dcgm-exporter",
        __gpu_monitoring_dcgm_exporter_csv_in_container="/etc/dcgm-exporter/gpufleet-collectors.csv",
        __gpu_monitoring_dcgm_exporter_image="registry.example/dcgm-exporter@sha256:" + "0" * 64,
        gpu_monitoring_dcgm_exporter_port=9400, gpu_monitoring_dcgm_exporter_interval_ms=30000)
    base.update(variables)
    return render_role_template("gpu_monitoring", name, base)


def test_node_exporter_flags_bind_and_name_the_web_configuration():
    text = render("node-exporter.env.j2", __gpu_monitoring_node_exporter_listen="10.231.9.11:9100",
                  __gpu_monitoring_web_enabled=True)
    assert ('ARGS="--web.listen-address=10.231.9.11:9100 --collector.textfile.directory=/var/lib/gpufleet/'
            'textfile --web.config.file=/etc/gpufleet-exporters/web-config.yml"') in text.splitlines()
    plain = render("node-exporter.env.j2", __gpu_monitoring_node_exporter_listen="10.231.9.11:9100",
                   __gpu_monitoring_web_enabled=False)
    assert "--web.config.file" not in plain


def test_dcgm_exporter_unit_binds_and_mounts_the_web_configuration():
    text = render("dcgm-exporter.service.j2", __gpu_monitoring_listen_host="[fd00:9::11]",
                  __gpu_monitoring_web_enabled=True)
    assert "  --address [fd00:9::11]:9400 \\" in text.splitlines()
    assert "  --web-config-file /etc/gpufleet-exporters/web-config.yml \\" in text.splitlines()
    assert "  --volume /etc/gpufleet-exporters:/etc/gpufleet-exporters:ro \\" in text.splitlines()
    plain = render("dcgm-exporter.service.j2", __gpu_monitoring_listen_host="10.0.0.1", __gpu_monitoring_web_enabled=False)
    assert "--web-config-file" not in plain and "/etc/gpufleet-exporters" not in plain
    assert "  --address 10.0.0.1:9400 \\" in plain.splitlines()
