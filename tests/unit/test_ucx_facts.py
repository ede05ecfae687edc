"""ucx_facts and module_utils/ucx on real `ucx_info -v` / `ucx_info -d` outputs (tests/fixtures/ucx/, see its
README.md): Debian 13's and Debian 12's builds captured in the node containers (no CUDA), and a UCX 1.16.0
build with CUDA and GDRCopy on a GPU node from openucx/ucx#9908."""
import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import ucx
from ansible_collections.gpufleet.cluster.plugins.modules import ucx_facts

from conftest import fixture_parts
from module_harness import patch_module, run_main


def body(name):
    return fixture_parts("ucx", name)[1]


DEB13_V, DEB13_D = body("debian13-ucx-1.18.1-v.txt"), body("debian13-ucx-1.18.1-d.txt")
DEB12_V, DEB12_D = body("debian12-ucx-1.13.1-v.txt"), body("debian12-ucx-1.13.1-d.txt")
CUDA_V, CUDA_D = body("rhel8-ucx-1.16.0-cuda-gdrcopy-v.txt"), body("rhel8-ucx-1.16.0-cuda-gdrcopy-d-excerpt.txt")


def test_versions_of_both_line_formats():
    version, configured = ucx.parse_version(DEB13_V)
    assert version == "1.18.1"
    assert "--with-verbs" in configured and "--with-cuda" not in configured
    assert ucx.parse_version(DEB12_V)[0] == "1.13.1"
    assert ucx.parse_version(CUDA_V) == (
        "1.16.0", "--prefix=/opt/ml4sw/MPI/ucx-1.16.0 --with-cuda=/usr/local/cuda --with-gdrcopy=/usr")
    assert ucx.parse_version("") == (None, None)


def test_transports_of_the_debian_builds():
    assert ucx.parse_transports(DEB13_D) == ["self", "tcp", "sysv", "posix"]
    assert ucx.parse_transports(DEB12_D) == ["self", "tcp", "sysv", "posix"]
    assert ucx.memory_domains(DEB13_D) == ["self", "tcp", "sysv", "posix"]


def test_old_indentation_is_read():
    # UCX 1.5-era output indents the transport line less ("#   Transport: cma").
    assert ucx.parse_transports("# Memory domain: cma\n#     Component: cma\n#\n#   Transport: cma\n") == ["cma"]


def test_cuda_build_gets_cuda_copy_cuda_ipc_and_gdr_copy_added():
    facts = ucx.decide(CUDA_V, CUDA_D, base_tls="rc,ud,sm,self")
    assert ucx.parse_transports(CUDA_D) == ["cuda_copy", "cuda_ipc", "gdr_copy", "dc_mlx5"]
    assert facts["built_with_cuda"] is True and facts["built_with_gdrcopy"] is True
    assert facts["tls"] == "rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy"
    assert facts["tls_source"] == "computed"
    assert facts["cuda_added"] == ["cuda_copy", "cuda_ipc", "gdr_copy"]
    assert facts["cuda_absent"] == {}
    assert facts["reason"] == "added cuda_copy,cuda_ipc,gdr_copy: listed by ucx_info -d"


def test_cuda_build_without_gdrcopy_listed_names_the_reason():
    devices = CUDA_D.split("# Memory domain: gdr_copy")[0]
    facts = ucx.decide(CUDA_V, devices)
    assert facts["tls"] == "rc,ud,sm,self,cuda_copy,cuda_ipc"
    assert list(facts["cuda_absent"]) == ["gdr_copy"]
    assert "gdrdrv" in facts["cuda_absent"]["gdr_copy"]


@pytest.mark.parametrize("version, devices", [(DEB13_V, DEB13_D), (DEB12_V, DEB12_D)])
def test_debian_builds_have_no_cuda_and_say_why(version, devices):
    facts = ucx.decide(version, devices, base_tls="rc,ud,sm,self")
    assert facts["tls"] == "rc,ud,sm,self"
    assert facts["cuda_added"] == [] and facts["cuda_available"] == []
    assert sorted(facts["cuda_absent"]) == ["cuda_copy", "cuda_ipc", "gdr_copy"]
    assert facts["cuda_absent"]["cuda_copy"].startswith("this UCX build has no CUDA support")
    assert facts["cuda_absent"]["gdr_copy"].startswith("this UCX build has no GDRCopy support")
    assert facts["reason"].startswith("no CUDA transport added: cuda_copy, cuda_ipc: this UCX build has no CUDA support")
    assert facts["built_with_cuda"] is None


def test_cuda_build_on_a_node_without_gpu():
    # The same --with-cuda build, with the cuda domains listing no device (the self..posix part of a Debian output).
    facts = ucx.decide(CUDA_V, DEB13_D)
    assert facts["tls"] == "rc,ud,sm,self"
    assert "built with CUDA but ucx_info -d lists no cuda_copy" in facts["cuda_absent"]["cuda_copy"]


@pytest.mark.parametrize("base, operator, tls, source", [
    ("rc,ud,sm,self", "rc,sm,self", "rc,sm,self", "operator"),
    ("^ud", None, "^ud", "base"),
    ("all", None, "all", "base"),
    ("rc,sm,self,cuda", None, "rc,sm,self,cuda", "base"),
    ("rc,sm,cuda_copy", None, "rc,sm,cuda_copy", "base"),
    ("rc, ud ,sm", None, "rc,ud,sm,cuda_copy,cuda_ipc,gdr_copy", "computed"),
])
def test_operator_and_base_forms_win(base, operator, tls, source):
    facts = ucx.decide(CUDA_V, CUDA_D, base_tls=base, operator_tls=operator)
    assert (facts["tls"], facts["tls_source"]) == (tls, source)
    if source != "computed":
        assert facts["cuda_added"] == []


def test_missing_ucx_info_is_reported():
    facts = ucx.decide("", "", found=False, error="ucx_info not found in PATH")
    assert facts["found"] is False and facts["version"] is None
    assert facts["tls"] == "rc,ud,sm,self"
    assert facts["cuda_absent"]["cuda_ipc"] == "ucx_info could not be run: ucx_info not found in PATH"


def fake_ucx_info(version, devices, calls):
    def run_command(module, args, **kwargs):
        calls.append(args)
        return 0, {"-v": version, "-d": devices}[args[1]], ""
    return run_command


def test_module_runs_both_commands_of_the_given_binary(monkeypatch, tmp_path):
    binary = tmp_path / "ucx_info"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    calls = []
    patch_module(monkeypatch, fake_ucx_info(CUDA_V, CUDA_D, calls))
    result = run_main(ucx_facts.main, {"ucx_info": str(binary), "base_tls": "rc,sm,self"})
    assert calls == [[str(binary), "-v"], [str(binary), "-d"]]
    fact = result["ansible_facts"]["gpufleet_ucx"]
    assert fact["version"] == "1.16.0"
    assert fact["tls"] == "rc,sm,self,cuda_copy,cuda_ipc,gdr_copy"
    assert result["changed"] is False


def test_module_without_the_binary(monkeypatch, tmp_path):
    calls = []
    patch_module(monkeypatch, fake_ucx_info(DEB13_V, DEB13_D, calls))
    result = run_main(ucx_facts.main, {"ucx_info": str(tmp_path / "missing" / "ucx_info")})
    fact = result["ansible_facts"]["gpufleet_ucx"]
    assert calls == [] and fact["found"] is False
    assert "not found" in fact["cuda_absent"]["cuda_copy"]


def test_module_reports_a_failing_ucx_info(monkeypatch):
    def run_command(module, args, **kwargs):
        return 127, "", "error while loading shared libraries: libucs.so.0"
    patch_module(monkeypatch, run_command)
    fact = run_main(ucx_facts.main, {})["ansible_facts"]["gpufleet_ucx"]
    assert fact["found"] is False
    assert "libucs.so.0" in fact["cuda_absent"]["cuda_copy"]
