"""Docker's daemon.json as container_runtime merged it, and what a container started on the node gets."""
import json
import re

import pytest

UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def size_bytes(text):
    """8G, 512m, 1073741824 -> bytes (Docker's units, powers of 1024)."""
    match = re.match(r"^(\d+)([bkmg]?)$", str(text).strip().lower())
    assert match, "not a Docker size: %r" % (text,)
    return int(match.group(1)) * UNITS[match.group(2)]


def _merge(base, overlay):
    out = dict(base)
    for key, value in overlay.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def wanted_daemon_json(docker):
    """The keys container_runtime merges into daemon.json, from the rendered role settings."""
    want = {
        "default-shm-size": docker["shm_size"],
        "default-ulimits": {
            "memlock": {"Name": "memlock", "Hard": docker["memlock"], "Soft": docker["memlock"]},
            "stack": {"Name": "stack", "Hard": docker["stack"], "Soft": docker["stack"]},
        },
        "log-driver": docker["log_driver"],
        "log-opts": {"max-size": docker["log_max_size"], "max-file": docker["log_max_file"]},
        "live-restore": docker["live_restore"],
    }
    if docker["no_new_privileges"]:
        want["no-new-privileges"] = True
    return _merge(want, docker["extra"])


def _subset_problems(want, have, path=""):
    problems = []
    for key, value in want.items():
        where = path + "/" + key
        if key not in have:
            problems.append("%s missing" % where)
        elif isinstance(value, dict) and isinstance(have[key], dict):
            problems += _subset_problems(value, have[key], where)
        elif have[key] != value:
            problems.append("%s is %r, want %r" % (where, have[key], value))
    return problems


@pytest.fixture(scope="module")
def daemon_json(node, expect):
    text = node.read(expect["docker"]["daemon_json"])
    assert text is not None, "%s: %s is missing" % (node.name, expect["docker"]["daemon_json"])
    return json.loads(text)


def test_daemon_json_holds_the_inventory_settings(node, expect, daemon_json):
    problems = _subset_problems(wanted_daemon_json(expect["docker"]), daemon_json)
    assert not problems, "%s: %s: %s" % (node.name, expect["docker"]["daemon_json"], "; ".join(problems))
    mode = node.check("stat -c '%%U:%%G %%a' -- %s", expect["docker"]["daemon_json"]).split()
    assert mode[0] == "root:root" and int(mode[1], 8) & 0o022 == 0, "%s: daemon.json is %s" % (node.name, mode)


def test_running_docker_uses_daemon_json(node, expect, daemon_json):
    if not expect["docker"]["manage_service"]:
        pytest.skip("container_runtime_manage_service is false for %s: the file is written, Docker not restarted"
                    % node.name)
    info = node.docker_info
    assert info.get("LoggingDriver") == daemon_json["log-driver"], info.get("LoggingDriver")
    assert info.get("LiveRestoreEnabled") == daemon_json["live-restore"], info.get("LiveRestoreEnabled")
    if daemon_json.get("no-new-privileges") and int(str(info.get("ServerVersion", "0")).split(".", maxsplit=1)[0]) >= 23:
        assert "name=no-new-privileges" in info.get("SecurityOptions", []), info.get("SecurityOptions")
    assert not [h for h in daemon_json.get("hosts", []) if h.startswith("tcp://")] or daemon_json.get("tlsverify"), (
        "%s: the Docker API listens on TCP without TLS client verification" % node.name)


def _pinned_image(node, expect):
    record = node.read(expect["image"]["record"])
    if not record:
        pytest.fail("%s: no image record %s, so no verified image to start" % (node.name, expect["image"]["record"]))
    return json.loads(record)["pinned"]


def test_containers_get_shm_and_memlock(node, expect):
    """A plain `docker run` of the verified image: /dev/shm and the limits come from daemon.json's defaults."""
    docker = expect["docker"]
    out = node.check("docker run --rm --pull never --network none --entrypoint /bin/sh %s "
                     "-c 'stat -f -c \"%%S %%b\" /dev/shm; ulimit -H -l; ulimit -S -l'", _pinned_image(node, expect))
    block, blocks, hard, soft = out.split()
    shm = int(block) * int(blocks)
    assert shm == size_bytes(docker["shm_size"]), (
        "%s: /dev/shm in a container is %d bytes, container_runtime_default_shm_size is %s"
        % (node.name, shm, docker["shm_size"]))
    want = "unlimited" if docker["memlock"] < 0 else str(docker["memlock"] // 1024)
    assert hard == want and soft == want, (
        "%s: memlock in a container is %s/%s (KiB, soft/hard), want %s" % (node.name, soft, hard, want))
