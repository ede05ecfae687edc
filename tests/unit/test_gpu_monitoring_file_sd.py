"""Unit tests for the Prometheus helpers of the gpu_monitoring role (plugins/filter/file_sd.py)."""
import json
import os
import re

import pytest

from ansible_collections.gpufleet.cluster.plugins.filter import file_sd

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "gpu_monitoring")


def node(name, address, gpus=0, **extra):
    exporters = [{"name": "node", "port": 9100}]
    if gpus:
        exporters.append({"name": "dcgm", "port": 9400})
    entry = {"node": name, "address": address, "cluster": "c1", "group": "gpu_nodes",
             "gpu_model": "NVIDIA H100 80GB HBM3" if gpus else "none", "gpu_count": gpus,
             "exporters": exporters}
    entry.update(extra)
    return entry


def test_one_group_per_node_and_exporter_sorted_with_string_labels():
    groups = file_sd.file_sd_targets([node("gpu02", "10.0.0.2", gpus=8), node("gpu01", "10.0.0.1")])
    assert [(g["labels"]["node"], g["labels"]["exporter"]) for g in groups] == [
        ("gpu01", "node"), ("gpu02", "dcgm"), ("gpu02", "node")]
    assert groups[1] == {"targets": ["10.0.0.2:9400"], "labels": {
        "cluster": "c1", "group": "gpu_nodes", "node": "gpu02", "exporter": "dcgm",
        "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": "8"}}
    assert all(file_sd.is_file_sd_group(g) for g in groups)
    json.dumps(groups)


@pytest.mark.parametrize("address,expected", [
    ("10.0.0.1", "10.0.0.1:9100"),
    ("gpu01.example.net", "gpu01.example.net:9100"),
    ("fd00::1", "[fd00::1]:9100"),
])
def test_target_address_forms(address, expected):
    assert file_sd.file_sd_targets([node("n", address)])[0]["targets"] == [expected]


def test_node_name_is_the_address_when_none_given():
    assert file_sd.file_sd_targets([node("gpu01", "")])[0]["targets"] == ["gpu01:9100"]


@pytest.mark.parametrize("bad,message", [
    ({"address": "a", "exporters": [{"name": "node", "port": 9100}]}, "no node name"),
    (node("n", "a", exporters=[{"name": "node", "port": 0}]), "outside 1-65535"),
    (node("n", "a", exporters=[{"name": "node", "port": "x"}]), "not a number"),
])
def test_bad_entries_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        file_sd.file_sd_targets([bad])


def test_merge_keeps_unreached_nodes_and_drops_removed_ones():
    old = file_sd.file_sd_targets([node("gpu01", "10.0.0.1"), node("gpu02", "10.0.0.2", gpus=8),
                                   node("gone", "10.0.0.9")])
    fresh = file_sd.file_sd_targets([node("gpu02", "10.0.0.22")])
    merged = file_sd.file_sd_merge(json.dumps(old), fresh, ["gpu01", "gpu02"])
    assert [(g["labels"]["node"], g["targets"]) for g in merged] == [
        ("gpu01", ["10.0.0.1:9100"]), ("gpu02", ["10.0.0.22:9100"])]


def test_merge_without_inventory_keeps_everything_not_refreshed():
    old = file_sd.file_sd_targets([node("a", "1.1.1.1"), node("b", "1.1.1.2")])
    merged = file_sd.file_sd_merge(old, file_sd.file_sd_targets([node("b", "1.1.1.3")]))
    assert [g["targets"][0] for g in merged] == ["1.1.1.1:9100", "1.1.1.3:9100"]


@pytest.mark.parametrize("existing", ["", "not json", "{}", json.dumps([{"targets": "x"}]), None])
def test_merge_treats_a_damaged_file_as_empty(existing):
    fresh = file_sd.file_sd_targets([node("a", "1.1.1.1")])
    assert file_sd.file_sd_merge(existing, fresh, ["a"]) == fresh


def test_merge_is_stable_so_the_file_does_not_churn():
    fresh = file_sd.file_sd_targets([node("b", "1.1.1.2"), node("a", "1.1.1.1", gpus=2)])
    once = file_sd.file_sd_merge([], fresh, ["a", "b"])
    twice = file_sd.file_sd_merge(json.dumps(once), fresh, ["a", "b"])
    assert json.dumps(once, sort_keys=True) == json.dumps(twice, sort_keys=True)


@pytest.mark.parametrize("addresses,network,expected", [
    (["127.0.0.1", "172.17.0.2", "10.231.9.11"], "10.231.9.0/24", "10.231.9.11"),
    (["127.0.0.1", "172.17.0.2"], "10.231.9.0/24", ""),
    (["10.1.2.3", "10.1.2.4"], "10.1.2.0/24", "10.1.2.3"),
    (["10.1.2.3", "fd00:1::5", "fe80::1%eth0"], "fd00:1::/64", "fd00:1::5"),
    (["fe80::1%eth0"], "fe80::/64", "fe80::1"),
    (["10.1.2.3"], "10.1.2.3/24", "10.1.2.3"),
    ([], "10.0.0.0/8", ""),
])
def test_address_in_network(addresses, network, expected):
    assert file_sd.address_in_network(addresses, network) == expected


def test_address_in_network_explains_a_bad_cidr():
    with pytest.raises(ValueError, match="not a network in CIDR form"):
        file_sd.address_in_network(["10.0.0.1"], "10.0.0.0/33")


def test_gpu_summary_prefers_topology_names():
    topo = {"gpus": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}]}
    facts = {"gpu_count": 2, "nvidia_gpus": [{"device": "0x2335"}, {"device": "0x2335"}]}
    assert file_sd.gpu_summary(facts, topo) == {"gpu_model": "NVIDIA H200", "gpu_count": 2}


def test_gpu_summary_falls_back_to_pci_ids():
    facts = {"gpu_count": 2, "nvidia_gpus": [{"device": "0x2330"}, {"device": "0x2330"}]}
    assert file_sd.gpu_summary(facts, {"gpu_count": 0, "gpus": []}) == {"gpu_model": "10de:2330", "gpu_count": 2}
    assert file_sd.gpu_summary({"gpu_count": 0, "nvidia_gpus": []}) == {"gpu_model": "none", "gpu_count": 0}


def test_filters_are_registered_and_wrap_errors():
    from ansible.errors import AnsibleFilterError
    filters = file_sd.FilterModule().filters()
    assert set(filters) == {"file_sd_targets", "file_sd_merge", "gpu_summary", "exporter_listen_address",
                            "exporter_listen_host", "exporter_web_config", "exporter_scrape_config"}
    with pytest.raises(AnsibleFilterError, match="not a network in CIDR form"):
        filters["exporter_listen_address"](["10.0.0.1"], monitoring_network="nonsense")


def _collectors():
    text = open(os.path.join(ROLE, "templates", "dcgm-exporter-collectors.csv.j2")).read()
    return [line for line in text.splitlines() if line and not line.startswith(("#", "{"))]


def test_collector_template_lines_have_dcgm_exporter_form():
    pattern = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+, (gauge|counter|label), \S.*$")
    lines = _collectors()
    assert lines and all(pattern.match(line) for line in lines), [l for l in lines if not pattern.match(l)]
    fields = [line.split(",")[0] for line in lines]
    assert len(fields) == len(set(fields))


def test_dashboard_is_valid_and_only_uses_collected_metrics():
    dash = json.load(open(os.path.join(ROLE, "files", "gpufleet-gpu-dashboard.json")))
    assert dash["uid"] and dash["schemaVersion"] >= 30
    fields = {line.split(",")[0] for line in _collectors()}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        for target in panel["targets"]:
            metric = re.match(r"^(DCGM_FI_[A-Z0-9_]+)", target["expr"]).group(1)
            assert metric in fields, "%s is not in the collectors CSV" % metric
