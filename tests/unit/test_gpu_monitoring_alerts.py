"""The gpufleet alert rules (roles/gpu_monitoring/files/prometheus) against what the exporters publish, their
promtool unit tests, and the Prometheus configuration the role's prometheus_server tasks write.

promtool itself runs in molecule/gpu_monitoring (`promtool check rules`, `promtool test rules`, on Debian's
promtool); these tests need no Prometheus: every metric a rule or a dashboard panel reads must be published by an
exporter the role installs, and every alert must have a promtool case where it fires and one where it stays silent.
"""
import json
import os
import re

import yaml

from ansible.plugins.filter.core import to_nice_yaml

from ansible_collections.gpufleet.cluster.plugins.filter import file_sd

from conftest import ROOT, render_role_template

ROLE = os.path.join(ROOT, "roles", "gpu_monitoring")
PROM = os.path.join(ROLE, "files", "prometheus")
TEST_FILES = ("gpufleet-alerts.test.yml", "gpufleet-validation.test.yml")
METRIC_RE = re.compile(r"\b(DCGM_FI_[A-Z0-9_]+|gpufleet_validate_[a-z_]+|node_[a-z_]+|up)\b")


def load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def rules():
    return [rule for group in load(os.path.join(PROM, "gpufleet-alerts.yml"))["groups"] for rule in group["rules"]]


def collected_fields():
    """DCGM fields of the collectors CSV the role writes, outside the profiling block (off by default)."""
    text = open(os.path.join(ROLE, "templates", "dcgm-exporter-collectors.csv.j2")).read()
    text = re.sub(r"{% if gpu_monitoring_dcgm_exporter_profiling %}.*?{% endif %}", "", text, flags=re.S)
    return {line.split(",")[0] for line in text.splitlines() if line.startswith("DCGM_")}


def validate_metrics():
    text = open(os.path.join(ROOT, "roles", "validate", "templates", "gpufleet_validate.prom.j2")).read()
    return set(re.findall(r"^# TYPE (gpufleet_validate_[a-z_]+) ", text, flags=re.M))


def test_every_rule_is_a_named_alert_with_severity_and_text():
    found = rules()
    names = [rule["alert"] for rule in found]
    assert len(names) == len(set(names)) == 17
    for rule in found:
        assert rule["alert"].startswith("Gpufleet"), rule
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]


def test_every_metric_a_rule_reads_is_published_by_the_role_s_exporters():
    fields = collected_fields()
    validate = validate_metrics()
    # node_exporter's own series and Prometheus' `up`, as the rules use them.
    node_exporter = {"node_textfile_scrape_error", "up"}
    used = set()
    for rule in rules():
        used |= set(METRIC_RE.findall(rule["expr"]))
    assert {m for m in used if m.startswith("DCGM_")} <= fields
    assert {m for m in used if m.startswith("gpufleet_")} <= validate
    assert {m for m in used if not m.startswith(("DCGM_", "gpufleet_"))} <= node_exporter
    # The families the alerts exist for are all there.
    for metric in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_DBE",
                   "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                   "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "gpufleet_validate_passed",
                   "gpufleet_validate_timestamp_seconds", "up"):
        assert metric in used, metric


def test_exporter_labels_in_the_rules_are_the_ones_the_targets_file_carries():
    groups = file_sd.file_sd_targets([{"node": "n1", "address": "10.0.0.1", "cluster": "c", "group": "gpu_nodes",
                                       "gpu_model": "m", "gpu_count": 8,
                                       "exporters": [{"name": "node", "port": 9100}, {"name": "dcgm", "port": 9400}]}])
    exporters = {g["labels"]["exporter"] for g in groups}
    controller = open(os.path.join(ROLE, "tasks", "controller.yml")).read()
    assert "{'name': 'node'" in controller and "{'name': 'dcgm'" in controller
    used = set()
    for rule in rules():
        used |= set(re.findall(r'exporter="([a-z]+)"', rule["expr"]))
        # Series are matched across exporters on labels every target has.
        for labels in re.findall(r"\bon \(([^)]*)\)", rule["expr"]):
            assert {label.strip() for label in labels.split(",")} <= set(file_sd.LABEL_KEYS), rule["alert"]
    assert used == exporters == {"node", "dcgm"}


def test_every_alert_has_a_firing_and_a_silent_promtool_case():
    fires, silent = set(), set()
    for name in TEST_FILES:
        suite = load(os.path.join(PROM, "tests", name))
        assert suite["rule_files"] == ["../gpufleet-alerts.yml"]
        for test in suite["tests"]:
            for case in test["alert_rule_test"]:
                (fires if case["exp_alerts"] else silent).add(case["alertname"])
                for alert in case["exp_alerts"]:
                    assert set(alert["exp_annotations"]) == {"summary", "description"}, case
    names = {rule["alert"] for rule in rules()}
    assert fires == names, names ^ fires
    assert silent == names, names ^ silent


def test_the_dashboard_panels_read_collected_metrics_only():
    dash = json.load(open(os.path.join(ROLE, "files", "gpufleet-gpu-dashboard.json")))
    fields = collected_fields()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            assert set(METRIC_RE.findall(target["expr"])) <= fields, panel["title"]


# --- the Prometheus server's configuration and flags, as the templates render them ----------------------------

def render(name, **variables):
    base = dict(ansible_managed="Ansible managed", gpu_monitoring_cluster_name="lab",
                gpu_monitoring_prometheus_scrape_interval="30s", gpu_monitoring_prometheus_evaluation_interval="30s",
                __gpu_monitoring_prometheus_rules_dir="/etc/prometheus/rules",
                gpu_monitoring_prometheus_alertmanagers=[], gpu_monitoring_prometheus_retention="15d",
                gpu_monitoring_prometheus_extra_args=[],
                __gpu_monitoring_web_config_file="/etc/gpufleet-exporters/web-config.yml")
    base.update(variables)
    return render_role_template("gpu_monitoring", name, base, {"to_nice_yaml": to_nice_yaml})


def test_prometheus_configuration_holds_the_exporters_job_and_the_rules():
    web = file_sd.exporter_web_config("/etc/gpufleet-exporters/tls.crt", "/etc/gpufleet-exporters/tls.key",
                                      {"prometheus": "$2y$10$" + "a" * 53})
    scrape = file_sd.exporter_scrape_config("gpufleet-lab", file_sd_files="/etc/prometheus/targets/lab-exporters.json",
                                            web_config=web, password_file="/etc/prometheus/gpufleet-exporters.password",
                                            ca_file="/etc/prometheus/gpufleet-exporters-ca.crt")
    config = yaml.safe_load(render("prometheus.yml.j2", __gpu_monitoring_scrape=scrape))
    assert config == {
        "global": {"scrape_interval": "30s", "evaluation_interval": "30s"},
        "rule_files": ["/etc/prometheus/rules/*.yml"],
        "scrape_configs": [{
            "job_name": "gpufleet-lab", "scheme": "https",
            "tls_config": {"ca_file": "/etc/prometheus/gpufleet-exporters-ca.crt"},
            "basic_auth": {"username": "prometheus", "password_file": "/etc/prometheus/gpufleet-exporters.password"},
            "file_sd_configs": [{"files": ["/etc/prometheus/targets/lab-exporters.json"]}]}]}
    routed = yaml.safe_load(render("prometheus.yml.j2", __gpu_monitoring_scrape=scrape,
                                   gpu_monitoring_prometheus_alertmanagers=["am.example:9093"]))
    assert routed["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["am.example:9093"]}]}]}


def test_prometheus_flags_bind_to_the_monitoring_address():
    text = render("prometheus.env.j2", __gpu_monitoring_prometheus_listen="10.231.9.12:9090",
                  __gpu_monitoring_prometheus_web=True)
    assert ('ARGS="--web.listen-address=10.231.9.12:9090 --storage.tsdb.retention.time=15d '
            '--web.config.file=/etc/gpufleet-exporters/web-config.yml"') in text.splitlines()
    plain = render("prometheus.env.j2", __gpu_monitoring_prometheus_listen="10.231.9.12:9090",
                   __gpu_monitoring_prometheus_web=False)
    assert "--web.config.file" not in plain


def test_every_default_is_documented_in_an_entry_point_with_its_default():
    defaults = load(os.path.join(ROLE, "defaults", "main.yml"))
    specs = load(os.path.join(ROLE, "meta", "argument_specs.yml"))["argument_specs"]
    server = specs["prometheus_server"]["options"]
    documented = dict(specs["main"]["options"], **server)
    assert set(defaults) == set(documented), set(defaults) ^ set(documented)
    for name in server:
        assert name.startswith("gpu_monitoring_prometheus_") or name == "gpu_monitoring_scrape_ca_cert", name
        assert server[name]["default"] == defaults[name], name
