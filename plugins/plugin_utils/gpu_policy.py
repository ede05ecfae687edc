# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""GPU policy (power limit, application clocks, ECC) and persistence mode: pure code, no Ansible import.

``parse_query`` reads ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`` (or the same with a
header line, which then names the columns); ``validate_policy`` checks the role variable; ``policy_commands``
gives the nvidia-smi argv lists the boot unit runs; ``policy_problems`` compares a policy with what the GPUs report;
``persistenced_exec_start`` rewrites the packaged nvidia-persistenced command line with the wanted persistence flag.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex

# The fields the role queries, in this order (scripts/capture-gpu-node.sh records the same query).
QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "persistence_mode",
    "power.limit",
    "power.min_limit",
    "power.max_limit",
    "clocks.applications.memory",
    "clocks.applications.graphics",
    "ecc.mode.current",
    "ecc.mode.pending",
)

# What each field becomes in a parsed GPU dict, and how its value is read.
_KEYS = {
    "index": ("index", "int"),
    "pci.bus_id": ("bus_id", "str"),
    "persistence_mode": ("persistence_mode", "mode"),
    "power.limit": ("power_limit", "float"),
    "power.min_limit": ("power_min_limit", "float"),
    "power.max_limit": ("power_max_limit", "float"),
    "clocks.applications.memory": ("application_memory_mhz", "int"),
    "clocks.applications.graphics": ("application_graphics_mhz", "int"),
    "ecc.mode.current": ("ecc_current", "mode"),
    "ecc.mode.pending": ("ecc_pending", "mode"),
}

POLICY_KEYS = ("power_limit_watts", "application_clocks", "ecc")
CLOCK_KEYS = ("memory_mhz", "graphics_mhz")
ECC_VALUES = ("enabled", "disabled")
# nvidia-smi rounds a set limit to its own resolution; 500 W reads back as 500.00.
POWER_TOLERANCE_WATTS = 0.5

_UNIT_SUFFIX = re.compile(r"\s*(W|MHz|MiB|%)$")
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def _unavailable(value):
    """True for what nvidia-smi prints instead of a value: [N/A], [Not Supported], N/A, [Unknown Error], ..."""
    return value in ("", "N/A") or (value.startswith("[") and value.endswith("]"))


def _value(raw, kind):
    value = _UNIT_SUFFIX.sub("", raw.strip())
    if _unavailable(value):
        return None
    if kind == "int":
        return int(float(value))
    if kind == "float":
        return float(value)
    if kind == "mode":
        if value not in ("Enabled", "Disabled"):
            raise ValueError("unexpected mode %r (Enabled or Disabled expected)" % raw.strip())
        return value
    return value


def parse_query(text, fields=QUERY_FIELDS):
    """Parse the CSV of ``nvidia-smi --query-gpu``.

    Without a header the columns are ``fields`` (QUERY_FIELDS by default); with one (``--format=csv``) the header
    names them and units ("[W]" in the header, " W" or " MHz" after values) are dropped. Fields this module does
    not know are kept under their printed name as strings.

    Returns a list with one dict per GPU: index, bus_id, persistence_mode, power_limit, power_min_limit,
    power_max_limit, application_memory_mhz, application_graphics_mhz, ecc_current, ecc_pending (those queried).
    Unavailable values ([N/A], [Not Supported]) are None; modes stay "Enabled" / "Disabled".
    Raises ValueError on anything else: an nvidia-smi error message, a row that does not fit the columns.
    """
    lines = [line.strip() for line in (text or "").replace("\r", "").splitlines() if line.strip()]
    columns = list(fields)
    if lines and lines[0].split(",")[0].strip() in _KEYS:
        columns = [_HEADER_UNIT.sub("", name.strip()) for name in lines[0].split(",")]
        lines = lines[1:]
    gpus = []
    for number, line in enumerate(lines, 1):
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(columns):
            raise ValueError("nvidia-smi line %d has %d fields, %d expected (%s): %s"
                             % (number, len(cells), len(columns), ", ".join(columns), line))
        gpu = {}
        for name, cell in zip(columns, cells):
            key, kind = _KEYS.get(name, (name, "str"))
            try:
                gpu[key] = _value(cell, kind)
            except ValueError as exc:
                raise ValueError("nvidia-smi line %d, field %s: %s" % (number, name, exc))
        gpus.append(gpu)
    return gpus


def _positive_int(value):
    """The int value of a positive integer (int or digit string); None otherwise (bool is not an int here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
        return number if number > 0 else None
    return None


def validate_policy(policy):
    """List of clear error messages for nvidia_driver_gpu_policy; empty when it is valid ({} is valid)."""
    if policy is None:
        return []
    if not isinstance(policy, dict):
        return ["nvidia_driver_gpu_policy must be a mapping, not %s" % type(policy).__name__]
    errors = []
    for key in sorted(set(policy) - set(POLICY_KEYS)):
        errors.append("nvidia_driver_gpu_policy: unknown key %r (known: %s)" % (key, ", ".join(POLICY_KEYS)))
    if "power_limit_watts" in policy and _positive_int(policy["power_limit_watts"]) is None:
        errors.append("nvidia_driver_gpu_policy.power_limit_watts must be a positive whole number of watts, not %r"
                      % (policy["power_limit_watts"],))
    if "application_clocks" in policy:
        clocks = policy["application_clocks"]
        if not isinstance(clocks, dict):
            errors.append("nvidia_driver_gpu_policy.application_clocks must be a mapping with memory_mhz and "
                          "graphics_mhz, not %r" % (clocks,))
        else:
            for key in sorted(set(clocks) - set(CLOCK_KEYS)):
                errors.append("nvidia_driver_gpu_policy.application_clocks: unknown key %r (known: %s)"
                              % (key, ", ".join(CLOCK_KEYS)))
            for key in CLOCK_KEYS:
                if key not in clocks:
                    errors.append("nvidia_driver_gpu_policy.application_clocks.%s is missing "
                                  "(nvidia-smi -ac sets memory and graphics together)" % key)
                elif _positive_int(clocks[key]) is None:
                    errors.append("nvidia_driver_gpu_policy.application_clocks.%s must be a positive whole number "
                                  "of MHz, not %r" % (key, clocks[key]))
    if "ecc" in policy and policy["ecc"] not in ECC_VALUES:
        errors.append("nvidia_driver_gpu_policy.ecc must be 'enabled' or 'disabled' (quoted, YAML reads on/off as "
                      "booleans), not %r" % (policy["ecc"],))
    return errors


def _checked(policy):
    errors = validate_policy(policy)
    if errors:
        raise ValueError("; ".join(errors))
    return policy or {}


def policy_commands(policy, persistence_held=True):
    """The nvidia-smi argv lists that apply ``policy``, in the order the boot unit runs them.

    ``nvidia-smi -pm 1`` comes first only when the policy sets a power limit or application clocks and nothing else
    holds persistence mode (``persistence_held`` false: the role does not run nvidia-persistenced with
    --persistence-mode); without it the driver drops both settings when the last client closes the GPU.
    Raises ValueError for an invalid policy.
    """
    policy = _checked(policy)
    commands = []
    if not persistence_held and ("power_limit_watts" in policy or "application_clocks" in policy):
        commands.append(["nvidia-smi", "-pm", "1"])
    if "power_limit_watts" in policy:
        commands.append(["nvidia-smi", "-pl", str(_positive_int(policy["power_limit_watts"]))])
    if "application_clocks" in policy:
        clocks = policy["application_clocks"]
        memory_mhz = _positive_int(clocks["memory_mhz"])
        graphics_mhz = _positive_int(clocks["graphics_mhz"])
        commands.append(["nvidia-smi", "-ac", "%d,%d" % (memory_mhz, graphics_mhz)])
    if "ecc" in policy:
        commands.append(["nvidia-smi", "-e", "1" if policy["ecc"] == "enabled" else "0"])
    return commands


def _gpu_name(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("bus_id") or "bus id unknown")


def policy_problems(policy, gpus, persistence_mode=None):
    """Compare ``policy`` with the parsed query of every GPU.

    Returns {"problems": [...], "pending": [...]}: problems fail the check (a power limit outside the GPU's range,
    naming both bounds; a value that differs from the policy; a setting the GPU does not report); pending lists what
    only a reboot completes (ECC mode set but not yet current). ``persistence_mode`` ("Enabled"/"Disabled"/None)
    is also checked when given. Raises ValueError for an invalid policy.
    """
    policy = _checked(policy)
    problems = []
    pending = []
    if not gpus:
        problems.append("nvidia-smi reported no GPU")
    for gpu in gpus:
        name = _gpu_name(gpu)
        if persistence_mode is not None and gpu.get("persistence_mode") != persistence_mode:
            problems.append("%s: persistence mode is %s, %s expected"
                            % (name, gpu.get("persistence_mode") or "not reported", persistence_mode))
        if "power_limit_watts" in policy:
            watts = _positive_int(policy["power_limit_watts"])
            low, high = gpu.get("power_min_limit"), gpu.get("power_max_limit")
            current = gpu.get("power_limit")
            if low is not None and high is not None and not low <= watts <= high:
                problems.append("%s: power_limit_watts %d W is outside the range this GPU accepts, min %.2f W and "
                                "max %.2f W" % (name, watts, low, high))
            elif current is None:
                problems.append("%s: reports no power limit ([N/A] or [Not Supported]); -pl %d cannot apply"
                                % (name, watts))
            elif abs(current - watts) > POWER_TOLERANCE_WATTS:
                problems.append("%s: power limit is %.2f W, the policy says %d W" % (name, current, watts))
        if "application_clocks" in policy:
            clocks = policy["application_clocks"]
            want = (_positive_int(clocks["memory_mhz"]), _positive_int(clocks["graphics_mhz"]))
            have = (gpu.get("application_memory_mhz"), gpu.get("application_graphics_mhz"))
            if None in have:
                problems.append("%s: reports no application clocks ([N/A] or [Not Supported]); -ac %d,%d cannot "
                                "apply" % ((name,) + want))
            elif have != want:
                problems.append("%s: application clocks are memory %d MHz, graphics %d MHz; the policy says "
                                "memory %d MHz, graphics %d MHz" % ((name,) + have + want))
        if "ecc" in policy:
            want = "Enabled" if policy["ecc"] == "enabled" else "Disabled"
            current, next_boot = gpu.get("ecc_current"), gpu.get("ecc_pending")
            if current is None and next_boot is None:
                problems.append("%s: has no ECC mode to set ([N/A] or [Not Supported]); ecc: %s cannot apply"
                                % (name, policy["ecc"]))
            elif next_boot != want:
                problems.append("%s: ECC pending mode is %s, the policy says %s"
                                % (name, next_boot or "not reported", want))
            elif current != want:
                pending.append("%s: reboot needed for ECC (current %s, pending %s)"
                               % (name, current or "not reported", next_boot))
    return {"problems": problems, "pending": pending}


def persistence_problems(gpus, expected):
    """Problems when a GPU's persistence mode is not ``expected`` ("Enabled" or "Disabled")."""
    return policy_problems({}, gpus, persistence_mode=expected)["problems"]


_PERSISTENCE_FLAGS = ("--persistence-mode", "--no-persistence-mode")
_EXEC_PREFIX = re.compile(r"^[-@:+!]+")


def _exec_start(unit_text):
    """The last ExecStart command of a unit file's [Service] section, or None (continuation lines joined)."""
    section = None
    command = None
    joined = re.sub(r"\\\n", " ", (unit_text or "").replace("\r", ""))
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section == "Service" and line.split("=", 1)[0].strip() == "ExecStart":
            value = line.split("=", 1)[1].strip()
            command = value or None
    return command


def persistenced_exec_start(unit_text, persistence_mode, binary="/usr/bin/nvidia-persistenced"):
    """The ExecStart for nvidia-persistenced with the wanted persistence flag.

    Keeps the packaged unit's binary, user and other options (Ubuntu: --user nvidia-persistenced --verbose, Debian:
    --user nvpd --group video, NVIDIA's RPM: /usr/sbin/...), drops any --persistence-mode / --no-persistence-mode
    and adds the wanted one. Without a packaged ExecStart (unit not installed yet) it is ``binary --verbose`` plus
    the flag. ``persistence_mode`` true gives --persistence-mode, false --no-persistence-mode.
    """
    command = _exec_start(unit_text)
    if command:
        command = _EXEC_PREFIX.sub("", command)
        words = [word for word in shlex.split(command) if word not in _PERSISTENCE_FLAGS]
    else:
        words = [binary, "--verbose"]
    words.append(_PERSISTENCE_FLAGS[0] if persistence_mode else _PERSISTENCE_FLAGS[1])
    return " ".join(shlex.quote(word) for word in words)
