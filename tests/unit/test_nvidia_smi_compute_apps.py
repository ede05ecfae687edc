"""parse_compute_apps in module_utils/nvidia_smi.py over real --query-compute-apps outputs (tests/fixtures/nvidia-smi)."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi

from conftest import FIXTURES as ALL_FIXTURES, fixture_parts

FIXTURES = os.path.join(ALL_FIXTURES, "nvidia-smi")

# What the rollout asks for (playbooks/upgrade_driver.yml, roles/nvidia_driver/tasks/rollout_idle.yml).
ROLLOUT_FIELDS = ("pid", "process_name", "used_memory")


def load(name):
    """(the command line of the fixture, the published text without its source header)."""
    header, body = fixture_parts("nvidia-smi", name)
    assert header[0].startswith("# source: https://github.com/"), "%s does not name its source" % name
    commands = [line for line in header if line.startswith("# command: nvidia-smi --query-compute-apps=")]
    assert len(commands) == 1, "%s does not name its command" % name
    return commands[0], body


# name: [(pid, process_name, used_memory_mib)] as recorded
CASES = {
    "compute-apps-h200-r590-load.txt": [
        (10291, "/root/tools/memhog", 2566),
        (10293, "/root/tools/memhog", 1542),
        (10309, "./gpu_burn", 28234),
    ],
    "compute-apps-h200-r590-idle.txt": [],
    "compute-apps-rtx4080s-r595-desktop.txt": [(2165, "/usr/bin/kwin_wayland", 25)],
}


def test_every_compute_apps_fixture_is_covered():
    on_disk = sorted(name for name in os.listdir(FIXTURES) if name.startswith("compute-apps-"))
    assert on_disk == sorted(list(CASES) + ["compute-apps-rtx2080s-r610-windows-na-memory.txt"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_processes_with_the_header(name):
    _unused, body = load(name)
    processes = nvidia_smi.parse_compute_apps(body)
    assert [(p["pid"], p["process_name"], p["used_memory_mib"]) for p in processes] == CASES[name]
    # The header named the other columns; they are kept as printed.
    for process in processes:
        assert process["gpu_uuid"].startswith("GPU-")


@pytest.mark.parametrize("name", sorted(CASES))
def test_processes_without_the_header_in_the_order_asked(name):
    """--format=csv,noheader: the same rows without their header, read in the order of the command's fields."""
    command, body = load(name)
    fields = command.split("--query-compute-apps=")[1].split()[0].split(",")
    rows = body.splitlines()[1:]
    processes = nvidia_smi.parse_compute_apps("\n".join(rows) + "\n", fields)
    assert [(p["pid"], p["process_name"], p["used_memory_mib"]) for p in processes] == CASES[name]


def test_rows_of_the_rollout_fields_from_the_recorded_columns():
    """The rollout's three columns, cut out of the recorded H200 rows (pid, process_name, used_gpu_memory are the
    last three columns there), read without a header as the role reads them."""
    _unused, body = load("compute-apps-h200-r590-load.txt")
    rows = [", ".join(line.split(", ")[-3:]) for line in body.splitlines()[1:]]
    assert rows[2] == "10309, ./gpu_burn, 28234 MiB"
    processes = nvidia_smi.parse_compute_apps("\n".join(rows), ROLLOUT_FIELDS)
    assert nvidia_smi.compute_apps_summary(processes) == [
        "pid 10291 /root/tools/memhog 2566 MiB",
        "pid 10293 /root/tools/memhog 1542 MiB",
        "pid 10309 ./gpu_burn 28234 MiB",
    ]


def test_memory_the_driver_cannot_report_is_none_not_zero():
    _unused, body = load("compute-apps-rtx2080s-r610-windows-na-memory.txt")
    processes = nvidia_smi.parse_compute_apps(body)
    assert len(processes) == 19
    assert processes[0]["pid"] == 2140
    assert processes[0]["process_name"] == "C:\\Windows\\System32\\dwm.exe"
    assert {p["used_memory_mib"] for p in processes} == {None}
    assert nvidia_smi.compute_apps_summary(processes[:1]) == ["pid 2140 C:\\Windows\\System32\\dwm.exe memory n/a"]


def test_a_process_name_with_commas_is_read_outside_in():
    line = "10309, ./train.py --tp 1,2, 28234 MiB"
    assert nvidia_smi.parse_compute_apps(line, ROLLOUT_FIELDS) == [
        {"pid": 10309, "process_name": "./train.py --tp 1,2", "used_memory_mib": 28234}]


def test_an_empty_answer_is_an_idle_node():
    assert nvidia_smi.parse_compute_apps("", ROLLOUT_FIELDS) == []
    assert nvidia_smi.parse_compute_apps("\n\n", ROLLOUT_FIELDS) == []


@pytest.mark.parametrize("text", [
    # what nvidia-smi prints instead of rows when it cannot reach the driver; it must never read as idle
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    "No devices were found",
    "10309, ./gpu_burn",
])
def test_output_that_is_not_rows_is_refused(text):
    with pytest.raises(ValueError):
        nvidia_smi.parse_compute_apps(text, ROLLOUT_FIELDS)


def test_filters_parse_and_summarise():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter.nvidia_smi import FilterModule
    filters = FilterModule().filters()
    processes = filters["gpu_compute_apps"]("10309, ./gpu_burn, 28234 MiB\n", "pid,process_name,used_memory")
    assert filters["gpu_compute_apps_summary"](processes) == ["pid 10309 ./gpu_burn 28234 MiB"]
    assert filters["gpu_compute_apps"]("") == []
    with pytest.raises(AnsibleFilterError, match="query-compute-apps"):
        filters["gpu_compute_apps"]("No devices were found")
