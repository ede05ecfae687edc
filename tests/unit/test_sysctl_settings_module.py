"""gpufleet.cluster.sysctl_settings on a directory standing for /proc/sys."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.modules import sysctl_settings
from module_harness import Fail, patch_module, run_main

HEADER = "# Managed by gpufleet.cluster: local changes are overwritten."


def no_commands(module, argv, **kwargs):
    raise AssertionError("sysctl_settings ran a command: %r" % (argv,))


@pytest.fixture
def proc(tmp_path, monkeypatch):
    patch_module(monkeypatch, no_commands)
    root = tmp_path / "proc-sys"
    for key, value in {"kernel.dmesg_restrict": "0\n", "net.ipv4.ip_forward": "1\n",
                       "net.ipv4.conf.all.rp_filter": "1\n", "net.ipv4.ip_local_port_range": "32768\t60999\n"}.items():
        path = root.joinpath(*key.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    return root


def live(root, key):
    return root.joinpath(*key.split(".")).read_text()


def args(tmp_path, proc, **extra):
    base = {"path": str(tmp_path / "60-test.conf"), "proc_root": str(proc),
            "settings": {"kernel.dmesg_restrict": 1, "net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 2,
                         "net.ipv4.ip_local_port_range": "32768 60999"}}
    base.update(extra)
    return base


def test_first_run_writes_file_and_sets_only_differing_keys(tmp_path, proc):
    result = run_main(sysctl_settings.main, args(tmp_path, proc))
    assert result["changed"] is True and result["file_changed"] is True
    assert result["applied"] == {"kernel.dmesg_restrict": "0", "net.ipv4.conf.all.rp_filter": "1"}
    assert live(proc, "kernel.dmesg_restrict") == "1\n"
    assert live(proc, "net.ipv4.conf.all.rp_filter") == "2\n"
    assert live(proc, "net.ipv4.ip_local_port_range") == "32768\t60999\n"  # equal after whitespace: untouched
    assert (tmp_path / "60-test.conf").read_text() == HEADER + "\n" + "\n".join([
        "kernel.dmesg_restrict=1", "net.ipv4.conf.all.rp_filter=2", "net.ipv4.ip_forward=1",
        "net.ipv4.ip_local_port_range=32768 60999"]) + "\n"


def test_second_run_changes_nothing(tmp_path, proc):
    run_main(sysctl_settings.main, args(tmp_path, proc))
    before = os.stat(str(tmp_path / "60-test.conf")).st_mtime_ns
    result = run_main(sysctl_settings.main, args(tmp_path, proc))
    assert result["changed"] is False and result["applied"] == {}
    assert os.stat(str(tmp_path / "60-test.conf")).st_mtime_ns == before


def test_live_drift_alone_is_set_again(tmp_path, proc):
    run_main(sysctl_settings.main, args(tmp_path, proc))
    proc.joinpath("kernel", "dmesg_restrict").write_text("0\n")
    result = run_main(sysctl_settings.main, args(tmp_path, proc))
    assert result["changed"] is True and result["file_changed"] is False
    assert result["applied"] == {"kernel.dmesg_restrict": "0"}
    assert live(proc, "kernel.dmesg_restrict") == "1\n"


def test_check_mode_reports_and_changes_nothing(tmp_path, proc):
    result = run_main(sysctl_settings.main, dict(args(tmp_path, proc), _ansible_check_mode=True, _ansible_diff=True))
    assert result["changed"] is True
    assert set(result["applied"]) == {"kernel.dmesg_restrict", "net.ipv4.conf.all.rp_filter"}
    assert "kernel.dmesg_restrict=1" in result["diff"]["after"] and result["diff"]["before"] == ""
    assert not (tmp_path / "60-test.conf").exists()
    assert live(proc, "kernel.dmesg_restrict") == "0\n"


def test_apply_false_writes_the_file_and_reads_no_live_value(tmp_path, proc):
    settings = {"kernel.not_in_this_kernel": 1}
    result = run_main(sysctl_settings.main, args(tmp_path, proc, settings=settings, apply=False))
    assert result["changed"] is True and result["applied"] == {}
    assert "kernel.not_in_this_kernel=1" in (tmp_path / "60-test.conf").read_text()


def test_unknown_key_fails_before_anything_is_written(tmp_path, proc):
    settings = {"kernel.dmesg_restrict": 1, "net.bridge.bridge-nf-call-iptables": 1}
    result = run_main(sysctl_settings.main, args(tmp_path, proc, settings=settings), expect=Fail)
    assert result["missing"] == ["net.bridge.bridge-nf-call-iptables"]
    assert "nothing was changed" in result["msg"]
    assert not (tmp_path / "60-test.conf").exists()
    assert live(proc, "kernel.dmesg_restrict") == "0\n"


def test_refused_value_puts_back_earlier_keys_and_writes_no_file(tmp_path, proc, monkeypatch):
    real_write = sysctl_settings.write_value

    def kernel_refuses_rp_filter(root, key, value):
        if key == "net.ipv4.conf.all.rp_filter":
            raise OSError(22, "Invalid argument")
        real_write(root, key, value)

    monkeypatch.setattr(sysctl_settings, "write_value", kernel_refuses_rp_filter)
    settings = {"kernel.dmesg_restrict": 1, "net.ipv4.conf.all.rp_filter": 2}
    result = run_main(sysctl_settings.main, args(tmp_path, proc, settings=settings), expect=Fail)
    assert "the kernel refused net.ipv4.conf.all.rp_filter=2" in result["msg"]
    assert live(proc, "kernel.dmesg_restrict") == "0\n"  # set first, then put back
    assert not (tmp_path / "60-test.conf").exists()


@pytest.mark.parametrize("key", ["net/ipv4/ip_forward", "..kernel", ".kernel.x", "kernel..x"])
def test_keys_that_are_not_sysctl_names_fail(tmp_path, proc, key):
    result = run_main(sysctl_settings.main, args(tmp_path, proc, settings={key: 1}), expect=Fail)
    assert key in result["msg"]
    assert not (tmp_path / "60-test.conf").exists()
