"""dev_char_links: the /dev/char links of the NVIDIA device nodes, on a device tree made under tmp_path.

The nodes are real character devices (os.mknod, which needs root, as the other module tests that chown do) with the
major and minor numbers a GPU node has: nvidia0/1 and nvidiactl on 195, nvidia-uvm on a dynamic major, a capability
node under nvidia-caps. Opening them is never tried.
"""
import os
import stat

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import dev_char
from ansible_collections.gpufleet.cluster.plugins.modules import dev_char_links
from module_harness import patch_module, run_main

NODES = {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "nvidia-uvm": (507, 0),
         "nvidia-uvm-tools": (507, 1), "nvidia-caps/nvidia-cap1": (510, 1)}


@pytest.fixture
def dev(tmp_path, monkeypatch):
    patch_module(monkeypatch, lambda *args, **kwargs: (0, "", ""))
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "char").mkdir()
    try:
        for name, (major, minor) in NODES.items():
            os.mknod(str(tmp_path / name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except (OSError, PermissionError) as error:
        pytest.skip("cannot make device nodes here: %s" % error)
    (tmp_path / "nvidia-not-a-device").write_text("")
    os.symlink("../null", str(tmp_path / "char" / "1:3"))  # udev's own link for /dev/null stays
    return tmp_path


def links(dev):
    char = dev / "char"
    return dict((name, os.readlink(str(char / name))) for name in os.listdir(str(char)) if os.path.islink(str(char / name)))


def test_every_nvidia_node_is_found_and_nothing_else(dev):
    assert dev_char.nvidia_devices(str(dev)) == sorted((name,) + numbers for name, numbers in NODES.items())


def test_the_missing_links_are_made_and_a_second_run_changes_nothing(dev):
    result = run_main(dev_char_links.main, {"dev": str(dev)})
    assert result["changed"] is True and result["devices"] == 6
    assert links(dev) == {"1:3": "../null", "195:0": "../nvidia0", "195:1": "../nvidia1", "195:255": "../nvidiactl",
                          "507:0": "../nvidia-uvm", "507:1": "../nvidia-uvm-tools",
                          "510:1": "../nvidia-caps/nvidia-cap1"}
    # Each link resolves to its device node.
    for name, target in links(dev).items():
        if name != "1:3":
            assert os.stat(str(dev / "char" / name)).st_rdev == os.makedev(*map(int, name.split(":")))
    again = run_main(dev_char_links.main, {"dev": str(dev)})
    assert again["changed"] is False and again["links"] == []


def test_check_mode_reports_and_makes_nothing(dev):
    result = run_main(dev_char_links.main, {"dev": str(dev), "_ansible_check_mode": True})
    assert result["changed"] is True and len(result["links"]) == 6
    assert links(dev) == {"1:3": "../null"}


def test_a_wrong_link_is_replaced_and_a_file_in_the_way_is_left_and_named(dev, monkeypatch):
    from ansible.module_utils import basic
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, warning, **kwargs: warnings.append(warning))
    os.symlink("../nvidia1", str(dev / "char" / "195:0"))
    (dev / "char" / "195:255").write_text("not a link")
    run_main(dev_char_links.main, {"dev": str(dev)})
    assert links(dev)["195:0"] == "../nvidia0"
    assert (dev / "char" / "195:255").read_text() == "not a link"
    assert warnings == ["%s exists and is not a link" % (dev / "char" / "195:255")]


def test_a_node_without_nvidia_devices_changes_nothing(tmp_path, monkeypatch):
    patch_module(monkeypatch, lambda *args, **kwargs: (0, "", ""))
    result = run_main(dev_char_links.main, {"dev": str(tmp_path)})
    assert result == dict(result, changed=False, devices=0, links=[])
    assert not (tmp_path / "char").exists()
