"""The exporters gpu_monitoring runs answer, on the address the inventory gives them and no other."""
import pytest

from fleet import scrape


def test_node_exporter_answers(node, expect):
    monitoring = expect["monitoring"]
    if not monitoring["node_exporter"]:
        pytest.skip("gpu_monitoring_node_exporter_enabled is false for %s" % node.name)
    body = scrape(node, expect, monitoring["node_exporter_port"])
    assert "node_exporter_build_info" in body and "node_cpu_seconds_total" in body, (
        "%s: node_exporter answers without its metrics: %s" % (node.name, body[:300]))
