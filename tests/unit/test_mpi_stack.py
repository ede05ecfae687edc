"""mpi_stack: the stack's sysconfdir, UCX config directory, version and environment, on captured tool output.

The Debian 12 / 13 files were captured in the node images (tests/fixtures/openmpi/, tests/fixtures/ucx-build/);
the UCX 1.11.1 and 1.17.0 `ucx_info -v` lines were published in public issue threads (their headers name them).
"""
import os
import re
import subprocess

import jinja2
import pytest
from ansible.plugins.filter.core import comment

from ansible_collections.gpufleet.cluster.plugins.module_utils import mpi_stack

from conftest import ROOT, fixture_parts

TEMPLATES = os.path.join(ROOT, "roles", "interconnect", "templates")


def body(subdir, name):
    return fixture_parts(subdir, name)[1]


@pytest.mark.parametrize("name", [
    "ompi_info-path-sysconfdir-5.0.7-debian13.txt",
    "ompi_info-path-sysconfdir-parsable-5.0.7-debian13.txt",
    "ompi_info-path-sysconfdir-4.1.4-debian12.txt",
    "ompi_info-path-sysconfdir-parsable-4.1.4-debian12.txt",
])
def test_os_sysconfdir_is_etc_openmpi(name):
    assert mpi_stack.ompi_path(body("openmpi", name)) == "/etc/openmpi"


def test_sysconfdir_of_a_relocated_prefix():
    # The same line shape with another prefix: the parser returns what the tool printed, not a default.
    text = body("openmpi", "ompi_info-path-sysconfdir-parsable-4.1.4-debian12.txt")
    text = text.replace("/etc/openmpi", "/opt/hpcx/ompi/etc")
    assert mpi_stack.ompi_path(text) == "/opt/hpcx/ompi/etc"


@pytest.mark.parametrize("text", ["", "ompi_info: Error: unknown path name\n", "Open MPI v5.0.7\n", None])
def test_sysconfdir_missing_is_an_error(text):
    with pytest.raises(ValueError, match="printed no sysconfdir"):
        mpi_stack.ompi_path(text)


@pytest.mark.parametrize("name, version", [
    ("ompi_info-version-5.0.7-debian13.txt", "5.0.7"),
    ("ompi_info-version-4.1.4-debian12.txt", "4.1.4"),
])
def test_ompi_version(name, version):
    assert mpi_stack.ompi_version(body("openmpi", name)) == version


def test_ompi_version_missing():
    with pytest.raises(ValueError, match="no Open MPI version"):
        mpi_stack.ompi_version("bash: ompi_info: command not found\n")


@pytest.mark.parametrize("name, version, library, prefix, sysconfdir", [
    ("ucx_info-v-1.18.1-debian13.txt", "1.18.1", "/lib/x86_64-linux-gnu/libucs.so.0", "/usr", "/etc"),
    ("ucx_info-v-1.13.1-debian12.txt", "1.13.1", None, "/usr", "/etc"),
    ("ucx_info-v-1.11.1-centos7.txt", "1.11.1", None, "/usr", "/etc"),
    ("ucx_info-v-1.17.0-prefix-build.txt", "1.17.0", "${HOME}/itoyori/ucx/myinstall/lib/libucs.so.0",
     "${HOME}/itoyori/ucx/myinstall", "${HOME}/itoyori/ucx/myinstall/etc"),
])
def test_ucx_build(name, version, library, prefix, sysconfdir):
    build = mpi_stack.ucx_build(body("ucx-build", name))
    assert (build["version"], build["library_path"], build["prefix"], build["sysconfdir"]) == (
        version, library, prefix, sysconfdir)
    assert build["config_dir"] == sysconfdir + "/ucx"
    assert build["configure_flags"][-1].startswith("--")


@pytest.mark.parametrize("name", ["ucx_info-v-1.18.1-debian13.txt", "ucx_info-v-1.13.1-debian12.txt"])
def test_os_ucx_reads_etc_ucx(name):
    assert mpi_stack.ucx_config_dir(body("ucx-build", name)) == "/etc/ucx"


def test_relocated_ucx_1_18_reads_next_to_its_library():
    # Checked in the trixie image: libucs is in /lib/x86_64-linux-gnu and a ucx.conf in /lib/etc/ucx/ (merged /usr:
    # /usr/lib/etc/ucx/) is read.
    text = body("ucx-build", "ucx_info-v-1.18.1-debian13.txt")
    assert mpi_stack.ucx_config_dir(text, configured_dir_usable=False) == "/lib/etc/ucx"


def test_relocated_ucx_1_13_reads_etc_next_to_its_library():
    # 1.13 prints no library path; the stack's UCX lib directory stands in. Its file is <libdir>/../etc/ucx.conf
    # (checked in the bookworm image: /usr/lib/etc/ucx.conf is read).
    text = body("ucx-build", "ucx_info-v-1.13.1-debian12.txt")
    assert mpi_stack.ucx_config_dir(text, False, "/opt/hpcx/ucx/lib") == "/opt/hpcx/ucx/etc"


def test_relocated_1_17_without_a_usable_library_path_needs_the_lib_dir():
    text = body("ucx-build", "ucx_info-v-1.17.0-prefix-build.txt")
    with pytest.raises(ValueError, match="library directory is unknown"):
        mpi_stack.ucx_config_dir(text, False)
    hpcx = text.replace("${HOME}/itoyori/ucx/myinstall", "/opt/hpcx/ucx")
    assert mpi_stack.ucx_config_dir(hpcx, False) == "/opt/hpcx/ucx/etc/ucx"


def test_ucx_1_11_has_only_its_configured_directory():
    text = body("ucx-build", "ucx_info-v-1.11.1-centos7.txt")
    assert mpi_stack.ucx_config_dir(text) == "/etc/ucx"
    with pytest.raises(ValueError, match="only from its configured directory"):
        mpi_stack.ucx_config_dir(text, False, "/opt/ucx/lib")


def test_ucx_without_a_version_is_an_error():
    with pytest.raises(ValueError, match="no UCX version"):
        mpi_stack.ucx_build("bash: ucx_info: command not found\n")


def test_os_layout_needs_no_environment():
    layout = mpi_stack.stack_layout("os")
    assert (layout["ompi_info"], layout["ucx_info"]) == ("ompi_info", "ucx_info")
    assert mpi_stack.stack_env(layout) == {}


def test_hpcx_layout_and_environment():
    layout = mpi_stack.stack_layout("hpcx", "/opt/hpcx/")
    assert layout["ompi_info"] == "/opt/hpcx/ompi/bin/ompi_info"
    assert layout["ucx_info"] == "/opt/hpcx/ucx/bin/ucx_info"
    env = mpi_stack.stack_env(layout, "/usr/bin:/bin", "/usr/local/cuda/lib64")
    path = env["PATH"].split(":")
    assert path[:2] == ["/opt/hpcx/ompi/bin", "/opt/hpcx/ucx/bin"]
    assert path.index("/opt/hpcx/ompi/bin") < path.index("/usr/bin")
    ld = env["LD_LIBRARY_PATH"].split(":")
    assert {"/opt/hpcx/ompi/lib", "/opt/hpcx/ucx/lib", "/opt/hpcx/nccl_rdma_sharp_plugin/lib"} <= set(ld)
    assert ld[-1] == "/usr/local/cuda/lib64"
    assert env["OPAL_PREFIX"] == env["MPI_HOME"] == "/opt/hpcx/ompi"


def test_doca_picks_the_newest_openmpi():
    layout = mpi_stack.stack_layout("doca", doca_mpi_dirs=["/usr/mpi/gcc/openmpi-4.1.5rc2",
                                                           "/usr/mpi/gcc/openmpi-4.1.7a1"])
    assert layout["ompi_info"] == "/usr/mpi/gcc/openmpi-4.1.7a1/bin/ompi_info"
    env = mpi_stack.stack_env(layout)
    assert env["PATH"].startswith("/usr/mpi/gcc/openmpi-4.1.7a1/bin:")
    assert "OPAL_PREFIX" not in env and env["MPI_HOME"] == "/usr/mpi/gcc/openmpi-4.1.7a1"


def test_doca_without_its_openmpi_is_an_error():
    with pytest.raises(ValueError, match="no Open MPI under /usr/mpi/gcc"):
        mpi_stack.stack_layout("doca", doca_mpi_dirs=[])


@pytest.mark.parametrize("stack, kwargs", [("mpich", {}), ("hpcx", {"hpcx_dir": "opt/hpcx"})])
def test_bad_layout_input(stack, kwargs):
    with pytest.raises(ValueError):
        mpi_stack.stack_layout(stack, **kwargs)


# ---- the profile script (templates/gpufleet-mpi.sh.j2), rendered and sourced by /bin/sh ----------------------
def render_profile(stack, layout, hpcx_dir="/opt/hpcx"):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    env.filters["regex_replace"] = lambda value, pattern, repl: re.sub(pattern, repl, value)
    return env.get_template("gpufleet-mpi.sh.j2").render(
        ansible_managed="Ansible managed", interconnect_stack=stack, interconnect_hpcx_dir=hpcx_dir,
        __interconnect_stack_layout=layout)


def source(script, tmp_path, shell_cmd, path="/usr/bin:/bin"):
    target = tmp_path / "gpufleet-mpi.sh"
    target.write_text(script)
    result = subprocess.run(["/bin/sh", "-c", ". %s; %s" % (target, shell_cmd)], env={"PATH": path},
                            capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def test_profile_puts_hpcx_first_and_sets_its_prefix(tmp_path):
    layout = mpi_stack.stack_layout("hpcx", "/opt/hpcx")
    out = source(render_profile("hpcx", layout), tmp_path,
                 'echo "$PATH"; echo "$LD_LIBRARY_PATH"; echo "$OPAL_PREFIX"; echo "$MPI_HOME"; echo "$HPCX_HOME"')
    assert out[0] == ":".join(layout["bin_dirs"]) + ":/usr/bin:/bin"
    assert out[1] == ":".join(layout["lib_dirs"])
    assert out[2:] == ["/opt/hpcx/ompi", "/opt/hpcx/ompi", "/opt/hpcx"]


def test_profile_sourced_twice_adds_nothing_twice(tmp_path):
    layout = mpi_stack.stack_layout("hpcx", "/opt/hpcx")
    target = tmp_path / "p.sh"
    target.write_text(render_profile("hpcx", layout))
    twice = source(render_profile("hpcx", layout), tmp_path, '. %s; echo "$PATH"; echo "$LD_LIBRARY_PATH"' % target)
    assert twice[0].split(":").count("/opt/hpcx/ompi/bin") == 1
    assert twice[1].split(":").count("/opt/hpcx/ompi/lib") == 1


def test_profile_makes_the_stack_ompi_info_win_over_usr_bin(tmp_path):
    # Stand-in executables (links to /bin/true) named ompi_info in a "system" and a "stack" bin directory: this
    # checks the PATH order the script produces, not Open MPI.
    system, stack = tmp_path / "usr-bin", tmp_path / "doca" / "openmpi-4.1.7" / "bin"
    for directory in (system, stack):
        directory.mkdir(parents=True)
        os.symlink("/bin/true", str(directory / "ompi_info"))
    layout = mpi_stack.stack_layout("doca", doca_mpi_dirs=[str(stack.parent)])
    out = source(render_profile("doca", layout), tmp_path, 'command -v ompi_info; echo "${OPAL_PREFIX:-unset}"',
                 path="%s:/bin" % system)
    assert out == [str(stack / "ompi_info"), "unset"]


# --- the mpi_stack_facts module: the same answers in one call, with fake ompi_info/ucx_info printing captures --

def fake_stack(bin_dir, ompi="5.0.7-debian13", ucx="1.18.1-debian13", ucx_rc=0):
    """Executables in bin_dir that print the captured outputs (and, for ucx_info, exit ucx_rc)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    answers = {
        "--version": body("openmpi", "ompi_info-version-%s.txt" % ompi),
        "--path": body("openmpi", "ompi_info-path-sysconfdir-parsable-%s.txt" % ompi),
    }
    for flag, text in answers.items():
        (bin_dir / ("ompi" + flag)).write_text(text)
    (bin_dir / "ucx-v").write_text(body("ucx-build", "ucx_info-v-%s.txt" % ucx))
    script = bin_dir / "ompi_info"
    script.write_text('#!/bin/sh\nexec /bin/cat "%s/ompi$1"\n' % bin_dir)
    script.chmod(0o755)
    script = bin_dir / "ucx_info"
    script.write_text('#!/bin/sh\n/bin/cat "%s/ucx-v"\nexit %d\n' % (bin_dir, ucx_rc))
    script.chmod(0o755)


def run_stack_facts(monkeypatch, args, check_mode=False, expect=None):
    from module_harness import Exit, patch_exits, run_main
    from ansible_collections.gpufleet.cluster.plugins.modules import mpi_stack_facts

    patch_exits(monkeypatch)  # the real run_command: the fake ompi_info and ucx_info run
    args = dict(args, os_sysconfdir="/etc/openmpi", _ansible_check_mode=check_mode)
    return run_main(mpi_stack_facts.main, args, expect=expect or Exit)


def test_the_module_asks_the_hpcx_stack_in_one_call(monkeypatch, tmp_path):
    fake_stack(tmp_path / "hpcx/ompi/bin")
    fake_stack(tmp_path / "hpcx/ucx/bin")
    result = run_stack_facts(monkeypatch, {"stack": "hpcx", "hpcx_dir": str(tmp_path / "hpcx")})
    assert result["usable"] is True and result["problem"] == ""
    assert (result["openmpi"], result["ucx"], result["sysconfdir"]) == ("5.0.7", "1.18.1", "/etc/openmpi")
    assert result["layout"]["ompi_info"] == str(tmp_path / "hpcx/ompi/bin/ompi_info")
    assert result["environment"]["OPAL_PREFIX"] == str(tmp_path / "hpcx/ompi")
    # Debian's UCX was configured with /etc, which exists here: ucx.conf is read from /etc/ucx.
    assert result["ucx_confdir"] == "/etc/ucx"


def test_the_module_finds_the_newest_doca_openmpi(monkeypatch, tmp_path):
    for version in ("4.1.7a1", "4.1.9a1"):
        (tmp_path / "mpi" / ("openmpi-" + version) / "bin").mkdir(parents=True)
    fake_stack(tmp_path / "mpi/openmpi-4.1.9a1/bin", ompi="4.1.4-debian12")
    (tmp_path / "mpi/openmpi-4.1.9a1/bin/ucx_info").unlink()  # DOCA-OFED's UCX is the one in /usr
    fake_stack(tmp_path / "usrbin", ucx="1.13.1-debian12")
    monkeypatch.setenv("PATH", str(tmp_path / "usrbin"))
    result = run_stack_facts(monkeypatch, {"stack": "doca", "doca_root": str(tmp_path / "mpi"),
                                           "default_path": str(tmp_path / "usrbin")})
    assert result["layout"]["mpi_home"] == str(tmp_path / "mpi/openmpi-4.1.9a1")
    assert (result["openmpi"], result["ucx"]) == ("4.1.4", "1.13.1")


def test_a_stack_that_does_not_run_fails_naming_the_command(monkeypatch, tmp_path):
    from module_harness import Fail
    fake_stack(tmp_path / "hpcx/ompi/bin")
    fake_stack(tmp_path / "hpcx/ucx/bin", ucx_rc=127)
    failed = run_stack_facts(monkeypatch, {"stack": "hpcx", "hpcx_dir": str(tmp_path / "hpcx")}, expect=Fail)
    assert "the hpcx stack is not usable" in failed["msg"] and "ucx_info failed (rc 127)" in failed["msg"]
    # An HPC-X that is not unpacked yet: in check mode the OS directories stand in, and the result says why.
    result = run_stack_facts(monkeypatch, {"stack": "hpcx", "hpcx_dir": str(tmp_path / "none")}, check_mode=True)
    assert result["usable"] is False and "ompi_info not found" in result["problem"]
    assert (result["sysconfdir"], result["ucx_confdir"], result["openmpi"]) == ("/etc/openmpi", "/etc/ucx", None)


def test_doca_not_installed_yet_in_check_mode_stands_in_with_the_os_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = run_stack_facts(monkeypatch, {"stack": "doca", "doca_root": str(tmp_path / "mpi"),
                                           "default_path": str(tmp_path / "empty")}, check_mode=True)
    assert result["layout"]["ompi_info"] == "ompi_info" and result["usable"] is False
