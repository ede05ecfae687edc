"""module_utils/gpudirect (choose_gpudirect and the readers) and the gpudirect_facts module.

The kallsyms lines are a real MLNX_OFED host's (tests/fixtures/gpudirect/, see its README.md); the open driver
flavour is the H200 capture in tests/fixtures/nvidia-smi/. /proc trees for the module are laid out like the
kernel's (proc(5): /proc/modules is "<name> <size> <refs> <deps> <state> <address>").
"""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import gpudirect
from ansible_collections.gpufleet.cluster.plugins.modules import gpudirect_facts

from conftest import fixture_parts
from module_harness import Fail, patch_module, run_main

DEBIAN_12 = "6.1.0-26-amd64"
DEBIAN_13 = "6.12.48+deb13-amd64"
UBUNTU_2404 = "6.8.0-45-generic"
EL9 = "5.14.0-427.13.1.el9_4.x86_64"
EL8 = "4.18.0-553.el8_10.x86_64"


def kallsyms_lines():
    return fixture_parts("gpudirect", "kallsyms-mofed-ib-core.txt")[1].splitlines()


def driver_version_text():
    return fixture_parts("nvidia-smi", "proc-driver-version-h200-vm-r580.txt")[1]


@pytest.mark.parametrize("release,expected", [
    (DEBIAN_12, (6, 1, 0)),
    (DEBIAN_13, (6, 12, 48)),
    (UBUNTU_2404, (6, 8, 0)),
    (EL9, (5, 14, 0)),
    (EL8, (4, 18, 0)),
    ("6.18.44-fc", (6, 18, 44)),
    ("6.10-rc1", (6, 10, 0)),
    ("", None),
    ("unknown", None),
])
def test_kernel_release_parsing(release, expected):
    assert gpudirect.parse_kernel_release(release) == expected


def test_kallsyms_only_the_function_counts():
    lines = kallsyms_lines()
    assert gpudirect.has_peer_memory_symbol(lines)
    # Without its 'T' line only the string/symbol-table entries and the .cold part are left: not exported.
    assert not gpudirect.has_peer_memory_symbol([line for line in lines if " T " not in line])
    assert not gpudirect.has_peer_memory_symbol([])


def test_driver_flavour():
    assert gpudirect.kernel_modules_flavour(driver_version_text()) == "open"
    assert gpudirect.kernel_modules_flavour("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ...\n") \
        == "proprietary"
    assert gpudirect.kernel_modules_flavour("") == ""


def test_ofed_summary_and_proc_modules():
    assert gpudirect.ofed_summary("MLNX_OFED_LINUX-5.4-3.5.8.0:\n") == "MLNX_OFED_LINUX-5.4-3.5.8.0"
    assert gpudirect.ofed_summary("") == ""
    modules = "nvidia_peermem 16384 0 - Live 0x0000000000000000\nib_core 479232 8 rdma_ucm, Live 0x0\n"
    assert gpudirect.module_loaded(modules, "nvidia-peermem")
    assert not gpudirect.module_loaded("ib_core 479232 8 - Live 0x0\n")


def choose(**overrides):
    args = dict(kernel_release=DEBIAN_13, kernel_modules_flavour="open", peer_memory_symbols=False,
                ofed_version="", gpu_count=8, hca_count=8, preference="auto")
    args.update(overrides)
    return gpudirect.choose_gpudirect(**args)


@pytest.mark.parametrize("release", [DEBIAN_12, DEBIAN_13, UBUNTU_2404, EL9])
def test_auto_prefers_dmabuf_with_open_modules_on_new_kernels(release):
    choice = choose(kernel_release=release, peer_memory_symbols=True, ofed_version="MLNX_OFED_LINUX-5.4-3.5.8.0:")
    assert choice["method"] == "dmabuf"
    assert choice["nccl_dmabuf"] is True and choice["load_peermem"] is False
    assert release in choice["reason"]


def test_auto_falls_back_to_peermem_where_ofed_exports_the_symbol():
    choice = choose(kernel_modules_flavour="proprietary", peer_memory_symbols=True,
                    ofed_version="MLNX_OFED_LINUX-5.4-3.5.8.0:\n")
    assert choice["method"] == "peermem"
    assert choice["load_peermem"] is True and choice["nccl_dmabuf"] is False
    assert "MLNX_OFED_LINUX-5.4-3.5.8.0" in choice["reason"] and "proprietary" in choice["reason"]

    old = choose(kernel_release=EL8, peer_memory_symbols=True)
    assert old["method"] == "peermem" and "older than 5.12" in old["reason"]


def test_inbox_stack_with_proprietary_modules_gets_none_with_both_reasons():
    choice = choose(kernel_modules_flavour="proprietary")
    assert choice["method"] == "none" and not choice["load_peermem"] and not choice["nccl_dmabuf"]
    assert "not the open ones" in choice["reason"]
    assert "ib_register_peer_memory_client" in choice["reason"]


def test_ofed_without_the_symbol_is_named():
    choice = choose(kernel_modules_flavour="proprietary", ofed_version="OFED-internal-24.04-0.6.6:")
    assert choice["method"] == "none" and "OFED-internal-24.04-0.6.6" in choice["reason"]


@pytest.mark.parametrize("gpus,hcas,missing", [(0, 2, "NVIDIA GPU"), (8, 0, "RDMA HCA"), (0, 0, "no NVIDIA GPU and no")])
@pytest.mark.parametrize("preference", ["auto", "dmabuf", "peermem"])
def test_no_gpu_or_no_hca_is_none_whatever_the_preference(gpus, hcas, missing, preference):
    choice = choose(gpu_count=gpus, hca_count=hcas, preference=preference, kernel_modules_flavour="")
    assert choice["method"] == "none" and missing in choice["reason"]


def test_preference_none_turns_it_off():
    assert choose(preference="none")["method"] == "none"


def test_explicit_preference_that_cannot_work_is_an_error():
    with pytest.raises(gpudirect.GpuDirectError, match="older than 5.12"):
        choose(preference="dmabuf", kernel_release=EL8)
    with pytest.raises(gpudirect.GpuDirectError, match="not the open ones"):
        choose(preference="dmabuf", kernel_modules_flavour="proprietary")
    with pytest.raises(gpudirect.GpuDirectError, match="ib_register_peer_memory_client"):
        choose(preference="peermem")
    with pytest.raises(gpudirect.GpuDirectError, match="must be one of"):
        choose(preference="gdrcopy")


def test_explicit_peermem_wins_over_dmabuf_where_both_work():
    choice = choose(preference="peermem", peer_memory_symbols=True)
    assert choice["method"] == "peermem" and "DMA-BUF not possible" not in choice["reason"]


# --- the module on recorded /proc trees ---

def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def proc_tree(tmp_path, kallsyms, modules="", driver=None):
    root = str(tmp_path)
    write(os.path.join(root, "proc/kallsyms"), "\n".join(kallsyms) + "\n")
    write(os.path.join(root, "proc/modules"), modules)
    if driver is not None:
        write(os.path.join(root, "proc/driver/nvidia/version"), driver)
    return root


def no_commands(module, args, **kwargs):
    raise AssertionError("no command runs on a recorded tree: %s" % args)


def test_module_dmabuf_node(tmp_path, monkeypatch):
    patch_module(monkeypatch, no_commands)
    root = proc_tree(tmp_path, [], driver=driver_version_text())
    result = run_main(gpudirect_facts.main, dict(root=root, gpu_count=1, hca_count=1, kernel_release=DEBIAN_13,
                                                 _ansible_check_mode=True))
    facts = result["ansible_facts"]["gpufleet_gpudirect"]
    assert facts["method"] == "dmabuf" and facts["nccl_dmabuf"] and not facts["load_peermem"]
    assert facts["kernel_modules"] == "open" and facts["peer_memory_symbols"] is False
    assert result["changed"] is False


def test_module_peermem_node_reads_kallsyms_and_modules(tmp_path, monkeypatch):
    patch_module(monkeypatch, no_commands)
    root = proc_tree(tmp_path, kallsyms_lines(), modules="nvidia_peermem 16384 0 - Live 0x0\n",
                     driver="NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ...\n")
    facts = run_main(gpudirect_facts.main, dict(root=root, gpu_count=8, hca_count=8, kernel_release=EL9))[
        "ansible_facts"]["gpufleet_gpudirect"]
    assert facts["method"] == "peermem" and facts["load_peermem"] and facts["peermem_loaded"]
    assert facts["peer_memory_symbols"] is True and facts["kernel_modules"] == "proprietary"


def test_module_container_without_gpu_or_hca(tmp_path, monkeypatch):
    patch_module(monkeypatch, no_commands)
    root = proc_tree(tmp_path, [])
    facts = run_main(gpudirect_facts.main, dict(root=root, gpu_count=0, hca_count=0))[
        "ansible_facts"]["gpufleet_gpudirect"]
    assert facts["method"] == "none" and "no NVIDIA GPU and no RDMA HCA" in facts["reason"]
    assert facts["kernel_modules"] == ""


def test_module_fails_on_an_impossible_preference(tmp_path, monkeypatch):
    patch_module(monkeypatch, no_commands)
    root = proc_tree(tmp_path, [], driver=driver_version_text())
    result = run_main(gpudirect_facts.main, dict(root=root, gpu_count=8, hca_count=8, kernel_release=DEBIAN_13,
                                                 preference="peermem"), expect=Fail)
    assert "nvidia-peermem cannot load" in result["msg"]


def test_module_runs_ofed_info_and_modinfo_on_the_live_root(monkeypatch):
    calls = []

    def fake(module, args, **kwargs):
        calls.append(args)
        if args[0].endswith("ofed_info"):
            return 0, "MLNX_OFED_LINUX-5.4-3.5.8.0:\n", ""
        return 1, "", ""

    patch_module(monkeypatch, fake)
    monkeypatch.setattr(gpudirect_facts, "kallsyms_has_peer_memory", lambda path: True)
    result = run_main(gpudirect_facts.main, dict(gpu_count=8, hca_count=8, preference="peermem"), expect=Fail)
    assert calls == [["/usr/bin/ofed_info", "-s"], ["/usr/bin/modinfo", "-F", "filename", "nvidia-peermem"]]
    assert "modinfo does not find" in result["msg"]
    assert result["gpufleet_gpudirect"]["ofed"] == "MLNX_OFED_LINUX-5.4-3.5.8.0"


# --- the role's nccl.conf with the choice ---

@pytest.mark.parametrize("tree,method,expected", [
    ("ib_ndr_active", "dmabuf", ["NCCL_DMABUF_ENABLE=1"]),
    ("ib_ndr_active", "peermem", ["NCCL_DMABUF_ENABLE=0"]),
    ("ib_ndr_active", "none", []),
    (None, "none", []),
])
def test_nccl_conf_follows_the_choice(tree, method, expected):
    from test_interconnect_templates import facts_for, lines, render

    choice = dict(method=method, nccl_dmabuf=method == "dmabuf", load_peermem=method == "peermem", reason="")
    got = [line for line in lines(render("nccl.conf.j2", gpufleet_rdma=facts_for(tree), gpufleet_gpudirect=choice))
           if line.startswith("NCCL_DMABUF_ENABLE")]
    assert got == expected


def test_nccl_settings_override_the_dmabuf_line():
    from test_interconnect_templates import facts_for, lines, render

    choice = dict(method="dmabuf", nccl_dmabuf=True, load_peermem=False, reason="")
    text = render("nccl.conf.j2", gpufleet_rdma=facts_for("ib_ndr_active"), gpufleet_gpudirect=choice,
                  interconnect_nccl_settings={"NCCL_DMABUF_ENABLE": 0})
    assert [line for line in lines(text) if line.startswith("NCCL_DMABUF")] == ["NCCL_DMABUF_ENABLE=0"]
