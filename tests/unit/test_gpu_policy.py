"""plugin_utils/gpu_policy.py: GPU policy validation, commands and checks; the nvidia-persistenced command line.

Real inputs: the nvidia-smi capture of the lab's H200 (tests/fixtures/nvidia-smi) and the packaged
nvidia-persistenced units of Ubuntu, Debian and NVIDIA's RPM (tests/fixtures/nvidia-persistenced). No public
output of the role's full policy query (persistence, power limits, application clocks, ECC current/pending) was
found; scripts/capture-gpu-node.sh records it (query-gpu-policy.txt) on the next GPU node. Until then the
policy cases below are rows written in that query's documented format, marked as such, not captured outputs.
"""
import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import gpu_policy as gp

from conftest import fixture_parts


def real(subdir, name):
    header, body = fixture_parts(subdir, name)
    assert header[0].startswith(("# source: https://", "# source: captured with scripts/capture-gpu-node.sh"))
    return body


# --- parse_query -----------------------------------------------------------------------------------------

def test_parse_query_reads_the_real_h200_capture_with_its_fields():
    text = real("nvidia-smi", "query-gpu-h200-1gpu-vm-r580.txt")
    gpus = gp.parse_query(text, ["index", "name", "uuid", "pci.bus_id", "memory.total", "driver_version"])
    assert gpus == [{
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-8623a53b-6368-076c-7ffe-844bb35674a7",
        "bus_id": "00000000:00:06.0", "memory.total": "143771", "driver_version": "580.159.04"}]


def test_parse_query_refuses_the_real_capture_read_as_the_policy_query():
    # Six fields where the policy query has ten: a clear error, not a wrong GPU.
    text = real("nvidia-smi", "query-gpu-h200-1gpu-vm-r580.txt")
    with pytest.raises(ValueError, match="6 fields, 10 expected"):
        gp.parse_query(text)


# Written in the format of the role's query (noheader,nounits), not captured: see the module docstring.
POLICY_QUERY_ROWS = (
    "0, 00000000:18:00.0, Enabled, 500.00, 200.00, 700.00, 2619, 1980, Enabled, Enabled\n"
    "1, 00000000:2A:00.0, Disabled, [N/A], [N/A], [N/A], [Not Supported], [Not Supported], [N/A], [N/A]\n"
)


def test_parse_query_values_unavailable_and_modes():
    first, second = gp.parse_query(POLICY_QUERY_ROWS)
    assert first == {
        "index": 0, "bus_id": "00000000:18:00.0", "persistence_mode": "Enabled", "power_limit": 500.0,
        "power_min_limit": 200.0, "power_max_limit": 700.0, "application_memory_mhz": 2619,
        "application_graphics_mhz": 1980, "ecc_current": "Enabled", "ecc_pending": "Enabled"}
    assert second["persistence_mode"] == "Disabled"
    assert [second[key] for key in ("power_limit", "application_memory_mhz", "ecc_current", "ecc_pending")] == \
        [None, None, None, None]


def test_parse_query_with_header_and_units():
    text = ("index, persistence_mode, power.limit [W], clocks.applications.memory [MHz]\n"
            "0, Enabled, 450.00 W, 1215 MHz\n")
    assert gp.parse_query(text) == [
        {"index": 0, "persistence_mode": "Enabled", "power_limit": 450.0, "application_memory_mhz": 1215}]


def test_parse_query_nvidia_smi_error_is_an_error():
    with pytest.raises(ValueError, match="fields"):
        gp.parse_query("Field \"ecc.mode.pendingx\" is not a valid field to query.\n")
    with pytest.raises(ValueError, match="Enabled or Disabled"):
        gp.parse_query("0, 00000000:18:00.0, On, 500.00, 200.00, 700.00, 2619, 1980, Enabled, Enabled\n")


def test_parse_query_empty_output_is_no_gpu():
    assert gp.parse_query("") == []


# --- validate_policy -------------------------------------------------------------------------------------

def test_empty_policy_is_valid():
    assert gp.validate_policy({}) == []
    assert gp.validate_policy(None) == []


def test_full_policy_is_valid():
    policy = {"power_limit_watts": 500, "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980},
              "ecc": "enabled"}
    assert gp.validate_policy(policy) == []


@pytest.mark.parametrize("policy, message", [
    ({"power_limt_watts": 500}, "unknown key 'power_limt_watts'"),
    ({"power_limit_watts": 0}, "power_limit_watts must be a positive whole number of watts, not 0"),
    ({"power_limit_watts": -300}, "positive whole number of watts, not -300"),
    ({"power_limit_watts": True}, "positive whole number of watts, not True"),
    ({"power_limit_watts": 450.5}, "positive whole number of watts, not 450.5"),
    ({"ecc": True}, "ecc must be 'enabled' or 'disabled'"),
    ({"ecc": "on"}, "ecc must be 'enabled' or 'disabled'"),
    ({"application_clocks": {"memory_mhz": 2619}}, "application_clocks.graphics_mhz is missing"),
    ({"application_clocks": {"memory_mhz": 2619, "graphics_mhz": 0}}, "graphics_mhz must be a positive"),
    ({"application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980, "sm_mhz": 1}}, "unknown key 'sm_mhz'"),
    ({"application_clocks": "2619,1980"}, "application_clocks must be a mapping"),
    (["power_limit_watts"], "must be a mapping"),
])
def test_invalid_policy_says_why(policy, message):
    errors = gp.validate_policy(policy)
    assert any(message in error for error in errors), errors


def test_policy_commands_refuse_an_invalid_policy():
    with pytest.raises(ValueError, match="unknown key"):
        gp.policy_commands({"ecc_mode": "enabled"})


# --- policy_commands -------------------------------------------------------------------------------------

def test_policy_commands_in_order():
    policy = {"ecc": "disabled", "application_clocks": {"memory_mhz": "2619", "graphics_mhz": 1980},
              "power_limit_watts": 500}
    assert gp.policy_commands(policy) == [
        ["nvidia-smi", "-pl", "500"], ["nvidia-smi", "-ac", "2619,1980"], ["nvidia-smi", "-e", "0"]]


def test_persistence_mode_only_when_nothing_holds_it():
    assert gp.policy_commands({"power_limit_watts": 500}, persistence_held=False)[0] == ["nvidia-smi", "-pm", "1"]
    assert gp.policy_commands({"ecc": "enabled"}, persistence_held=False) == [["nvidia-smi", "-e", "1"]]
    assert gp.policy_commands({}, persistence_held=False) == []


# --- policy_problems -------------------------------------------------------------------------------------

def gpus():
    return gp.parse_query(POLICY_QUERY_ROWS)[:1]


def test_policy_in_force_passes():
    policy = {"power_limit_watts": 500, "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980},
              "ecc": "enabled"}
    assert gp.policy_problems(policy, gpus(), persistence_mode="Enabled") == {"problems": [], "pending": []}


def test_power_limit_outside_the_range_names_both_bounds():
    result = gp.policy_problems({"power_limit_watts": 1000}, gpus())
    assert result["problems"] == [
        "GPU 0 (00000000:18:00.0): power_limit_watts 1000 W is outside the range this GPU accepts, "
        "min 200.00 W and max 700.00 W"]


def test_applied_values_that_differ_are_problems():
    result = gp.policy_problems(
        {"power_limit_watts": 400, "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1755}}, gpus())
    assert result["problems"] == [
        "GPU 0 (00000000:18:00.0): power limit is 500.00 W, the policy says 400 W",
        "GPU 0 (00000000:18:00.0): application clocks are memory 2619 MHz, graphics 1980 MHz; the policy says "
        "memory 2619 MHz, graphics 1755 MHz"]


def test_ecc_pending_is_reported_as_pending_not_a_problem():
    gpu = dict(gpus()[0], ecc_current="Disabled", ecc_pending="Enabled")
    result = gp.policy_problems({"ecc": "enabled"}, [gpu])
    assert result["problems"] == []
    assert result["pending"] == ["GPU 0 (00000000:18:00.0): reboot needed for ECC (current Disabled, pending Enabled)"]


def test_ecc_not_even_pending_is_a_problem():
    result = gp.policy_problems({"ecc": "disabled"}, gpus())
    assert result["problems"] == ["GPU 0 (00000000:18:00.0): ECC pending mode is Enabled, the policy says Disabled"]


def test_unsupported_settings_are_problems():
    second = gp.parse_query(POLICY_QUERY_ROWS)[1]
    policy = {"power_limit_watts": 500, "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980},
              "ecc": "enabled"}
    problems = gp.policy_problems(policy, [second])["problems"]
    assert len(problems) == 3
    assert all(problem.startswith("GPU 1 (00000000:2A:00.0): ") for problem in problems)
    assert "cannot apply" in problems[0] and "-pl 500" in problems[0]


def test_no_gpu_reported_is_a_problem():
    assert gp.policy_problems({"ecc": "enabled"}, [])["problems"] == ["nvidia-smi reported no GPU"]


def test_persistence_problems_on_the_real_query_fields():
    rows = gp.parse_query(POLICY_QUERY_ROWS)
    assert gp.persistence_problems(rows, "Enabled") == [
        "GPU 1 (00000000:2A:00.0): persistence mode is Disabled, Enabled expected"]


# --- persistenced_exec_start on the packaged units ---------------------------------------------------------

@pytest.mark.parametrize("name, enabled, expected", [
    ("ubuntu-nvidia-compute-utils-580-server.service", True,
     "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose --persistence-mode"),
    ("ubuntu-nvidia-compute-utils-580-server.service", False,
     "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose --no-persistence-mode"),
    ("debian-nvidia-persistenced.service", True,
     "/usr/bin/nvidia-persistenced --user nvpd --group video --persistence-mode"),
    ("nvidia-cuda-rpm-nvidia-persistenced.service", True,
     "/usr/sbin/nvidia-persistenced --user nvidia-persistenced --persistence-mode"),
])
def test_exec_start_keeps_the_packaged_command(name, enabled, expected):
    unit = real("nvidia-persistenced", name)
    assert gp.persistenced_exec_start(unit, enabled) == expected


def test_ubuntu_unit_really_turns_persistence_off():
    assert "--no-persistence-mode" in real("nvidia-persistenced", "ubuntu-nvidia-compute-utils-580-server.service")


def test_exec_start_without_a_unit_uses_the_binary_found():
    assert gp.persistenced_exec_start("", True, "/usr/sbin/nvidia-persistenced") == \
        "/usr/sbin/nvidia-persistenced --verbose --persistence-mode"


def test_exec_start_takes_the_last_command_after_a_reset():
    unit = ("[Service]\nExecStart=/usr/bin/nvidia-persistenced --no-persistence-mode\nExecStart=\n"
            "ExecStart=-/usr/bin/nvidia-persistenced \\\n  --user nvpd\n")
    assert gp.persistenced_exec_start(unit, True) == "/usr/bin/nvidia-persistenced --user nvpd --persistence-mode"


# --- the filters the role calls ----------------------------------------------------------------------------

def test_filters_pipe_the_parsed_query_into_the_check():
    from ansible_collections.gpufleet.cluster.plugins.filter.gpu_policy import FilterModule
    filters = FilterModule().filters()
    rows = filters["gpu_policy_parse_query"](POLICY_QUERY_ROWS)
    assert filters["gpu_policy_problems"](rows[:1], {"power_limit_watts": 500}) == {"problems": [], "pending": []}
    assert filters["gpu_policy_commands"]({"ecc": "enabled"}, True) == [["nvidia-smi", "-e", "1"]]
    assert filters["gpu_policy_validate"]({"ecc": "yes"})


def test_filters_turn_bad_input_into_a_filter_error():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter.gpu_policy import FilterModule
    with pytest.raises(AnsibleFilterError, match="unknown key"):
        FilterModule().filters()["gpu_policy_commands"]({"watts": 1})
