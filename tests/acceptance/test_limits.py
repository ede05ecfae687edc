"""/dev/shm (os_hardening) and the locked-memory limits RDMA needs (interconnect)."""
import re

import pytest

from fleet import key_value_lines


def _fstab_shm(node):
    for line in (node.read("/etc/fstab") or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and not fields[0].startswith("#") and fields[1] == "/dev/shm":
            return fields
    return None


def test_dev_shm_in_fstab(node, expect):
    fields = _fstab_shm(node)
    assert fields, "%s: /etc/fstab has no /dev/shm entry" % node.name
    options = fields[3].split(",")
    assert fields[2] == "tmpfs" and "nosuid" in options and "nodev" in options, fields
    assert "size=%s" % expect["os"]["dev_shm_size"] in options, (
        "%s: /dev/shm is %s in fstab, os_hardening_dev_shm_size is %s"
        % (node.name, fields[3], expect["os"]["dev_shm_size"]))


def test_dev_shm_mounted_nosuid_nodev(node, expect):
    if node.container:
        pytest.skip("%s is a %s container: its /dev/shm is the container engine's, only fstab is written"
                    % (node.name, node.container))
    options = node.check("findmnt -n -o FSTYPE,OPTIONS /dev/shm").split()
    assert options[0] == "tmpfs" and {"nosuid", "nodev"} <= set(options[1].split(",")), options
    size = node.check("df -k --output=size /dev/shm").split()[-1]
    wanted = expect["os"]["dev_shm_size"]
    if wanted.endswith("%"):
        total = int(re.search(r"MemTotal:\s+(\d+)", node.read("/proc/meminfo")).group(1))
        expected_kib = total * int(wanted[:-1]) // 100
        assert abs(int(size) - expected_kib) <= max(4096, expected_kib // 100), (
            "%s: /dev/shm is %s KiB, %s of memory is %d KiB" % (node.name, size, wanted, expected_kib))


def test_training_user_memlock_unlimited(node, expect):
    """pam_limits gives the training user's sessions no locked-memory limit (the file interconnect writes)."""
    user = expect["interconnect"]["training_user"]
    found = []
    for line in (node.read("/etc/security/limits.d/90-gpufleet-memlock.conf") or "").splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 4 and fields[0] == user and fields[2] == "memlock":
            found.append(fields)
    assert found == [[user, "-", "memlock", "unlimited"]], (
        "%s: the memlock limit of %s in limits.d is %s" % (node.name, user, found))


def test_systemd_services_memlock_unlimited(node):
    conf = key_value_lines(node.read("/etc/systemd/system.conf.d/90-gpufleet-memlock.conf"))
    assert conf.get("DefaultLimitMEMLOCK") == "infinity", conf
    effective = node.check("systemctl show --property=DefaultLimitMEMLOCK --value").strip()
    if effective != "infinity" and node.container:
        hard = node.check("sh -c 'ulimit -H -l'").strip()
        pytest.skip("%s is a %s container whose own memlock limit is %s KiB: systemd cannot raise its default "
                    "(DefaultLimitMEMLOCK=%s), the file is written for the host"
                    % (node.name, node.container, hard, effective))
    assert effective == "infinity", "%s: systemd's DefaultLimitMEMLOCK is %s" % (node.name, effective)
