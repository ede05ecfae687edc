"""gpufleet.cluster.lynis_audit: the container profile and the report figures, on lynis 3.1.4's real files."""
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils import lynis
from ansible_collections.gpufleet.cluster.plugins.modules import lynis_audit

from conftest import fixture_parts
from module_harness import Exit, Fail, patch_module, run_main

SYSCTL_FILE = """# Managed by gpufleet.cluster: local changes are overwritten.
fs.protected_fifos = 2
kernel.kptr_restrict = 2
kernel.unprivileged_bpf_disabled = 1
net.ipv4.conf.all.rp_filter = 2
net.ipv4.ip_forward = 1
net.ipv4.conf.all.forwarding = 1
kernel.yama.ptrace_scope = 1
"""


def expectations():
    return lynis.profile_sysctl_expectations(fixture_parts("lynis", "default-prf-sysctl-3.1.4.txt")[1])


def test_profile_expectations_read_alternatives():
    expected = expectations()
    assert expected["fs.protected_fifos"] == {"2"}
    assert expected["kernel.yama.ptrace_scope"] == {"1", "2", "3"}
    assert expected["kernel.perf_event_paranoid"] == {"2", "3", "4"}
    assert expected["net.ipv4.conf.all.forwarding"] == {"0"}


# Live values of the host kernel under a container: as captured in the same container (/proc/sys).
LIVE = {"fs.protected_fifos": "0", "kernel.kptr_restrict": "0", "kernel.unprivileged_bpf_disabled": "2",
        "net.ipv4.conf.all.rp_filter": "0", "net.ipv4.ip_forward": "1", "net.ipv4.conf.all.forwarding": "1",
        "kernel.yama.ptrace_scope": None}


def test_real_host_scores_everything():
    assert lynis.unscored_tests(False, expectations(), lynis.sysctl_file_values(SYSCTL_FILE), "/x", LIVE) == []


def test_a_key_whose_live_value_already_matches_stays_scored():
    live = dict(LIVE, **{"fs.protected_fifos": "2"})
    skipped = dict(lynis.unscored_tests(True, expectations(), lynis.sysctl_file_values(SYSCTL_FILE), "/x", live))
    assert "KRNL-6000:fs.protected_fifos" not in skipped
    assert "KRNL-6000:kernel.kptr_restrict" in skipped


def test_live_values_read_from_proc(tmp_path):
    (tmp_path / "fs").mkdir()
    (tmp_path / "fs" / "protected_fifos").write_text("1\n")
    assert lynis.live_sysctl_values(["fs.protected_fifos", "kernel.nope"], str(tmp_path)) == {
        "fs.protected_fifos": "1", "kernel.nope": None}


def test_container_leaves_host_tests_and_done_keys_unscored():
    skipped = dict(lynis.unscored_tests(True, expectations(), lynis.sysctl_file_values(SYSCTL_FILE), "/etc/s.conf",
                                        LIVE))
    for test in ("KRNL-5788", "FILE-6310", "ACCT-9622", "ACCT-9628", "MACF-6290"):
        assert test in skipped and skipped[test]
    # Keys the file sets as the profile expects: done by the role, live value is the host's.
    for key in ("fs.protected_fifos", "kernel.kptr_restrict", "kernel.unprivileged_bpf_disabled",
                "kernel.yama.ptrace_scope"):
        assert "KRNL-6000:" + key in skipped
        assert "/etc/s.conf" in skipped["KRNL-6000:" + key]
    # Documented exceptions stay scored: the audit still counts them against the node.
    for key in ("net.ipv4.conf.all.rp_filter", "net.ipv4.conf.all.forwarding", "net.ipv4.ip_forward"):
        assert "KRNL-6000:" + key not in skipped


def test_profile_text_has_a_reason_above_each_skip():
    text = lynis.profile_text([("KRNL-5788", "no kernel image"), ("KRNL-6000:fs.x", "done")])
    lines = text.splitlines()
    assert lines[1:] == ["# no kernel image", "skip-test=KRNL-5788", "# done", "skip-test=KRNL-6000:fs.x"]


def test_real_report_figures():
    report = lynis.parse_report(fixture_parts("lynis", "report-debian13-container-3.1.4.dat")[1])
    assert report["hardening_index"] == 68
    assert report["tests_performed"] == 246
    assert report["lynis_version"] == "3.1.4"
    tests = [entry["test"] for entry in report["lynis_suggestions"]]
    assert "FINT-4350" in tests and "SSH-7408" in tests
    ssh = [entry["details"] for entry in report["lynis_suggestions"] if entry["test"] == "SSH-7408"]
    assert "MaxSessions (set 10 to 2)" in ssh
    assert report["lynis_warnings"] == []


def test_module_runs_lynis_with_the_profile_and_returns_the_figures(monkeypatch, tmp_path):
    body = fixture_parts("lynis", "report-debian13-container-3.1.4.dat")[1]
    prf = tmp_path / "default.prf"
    prf.write_text(fixture_parts("lynis", "default-prf-sysctl-3.1.4.txt")[1])
    conf = tmp_path / "60.conf"
    conf.write_text(SYSCTL_FILE)
    seen = {}

    def run_command(module, argv, **kwargs):
        seen["argv"] = argv
        seen["profile"] = open(argv[argv.index("--profile") + 1]).read()
        with open(argv[argv.index("--report-file") + 1], "w") as handle:
            handle.write(body)
        return 0, "", ""

    patch_module(monkeypatch, run_command)
    monkeypatch.setattr(os, "access", lambda path, mode: True)
    monkeypatch.setattr(lynis_audit, "detect_container", lambda: "docker")
    proc = tmp_path / "proc"
    (proc / "fs").mkdir(parents=True)
    (proc / "fs" / "protected_fifos").write_text("0\n")
    result = run_main(lynis_audit.main, {"profile": str(prf), "sysctl_file": str(conf), "proc_root": str(proc)},
                      expect=Exit)
    assert result["changed"] is False and result["container"] is True
    assert result["hardening_index"] == 68
    assert result["lynis_warnings"] == [] and len(result["lynis_suggestions"]) == 36
    assert "skip-test=KRNL-5788" in seen["profile"]
    assert "skip-test=KRNL-6000:fs.protected_fifos" in seen["profile"]
    assert "skip-test=KRNL-6000:net.ipv4.conf.all.forwarding" not in seen["profile"]
    assert {"test": "KRNL-5788", "reason": dict(lynis.CONTAINER_UNSCORED)["KRNL-5788"]} in result["unscored"]
    # The report and the profile lived in a private directory that is gone afterwards.
    assert not os.path.exists(os.path.dirname(seen["argv"][seen["argv"].index("--profile") + 1]))


def test_module_fails_without_an_index(monkeypatch, tmp_path):
    def run_command(module, argv, **kwargs):
        return 1, "", "lynis: broken"

    patch_module(monkeypatch, run_command)
    monkeypatch.setattr(os, "access", lambda path, mode: True)
    monkeypatch.setattr(lynis_audit, "detect_container", lambda: None)
    result = run_main(lynis_audit.main, {"profile": str(tmp_path / "none"), "sysctl_file": str(tmp_path / "none")},
                      expect=Fail)
    assert "no hardening index" in result["msg"]
