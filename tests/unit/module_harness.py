"""Run a module's main() in-process with run_command mocked: the harness the module tests share."""
import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class Exit(Exception):
    """exit_json was called; args[0] holds its keyword arguments."""


class Fail(Exception):
    """fail_json was called; args[0] holds its keyword arguments."""


def _raise(exc):
    def handler(module, **kwargs):
        raise exc(kwargs)
    return handler


def patch_exits(monkeypatch):
    """Route exit_json/fail_json to Exit/Fail and leave the rest real: the module runs its commands and files."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _raise(Exit))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _raise(Fail))


def patch_module(monkeypatch, run_command):
    """Route exit_json/fail_json to Exit/Fail, run_command to the fake, and find every binary in /usr/bin."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _raise(Exit))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _raise(Fail))
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda module, name, required=False, opt_dirs=None: "/usr/bin/" + name)


def run_main(main, args, expect=Exit):
    """Call main() with args and return the result dict of the exit (or failure) it ends with."""
    with patch_module_args(args):
        with pytest.raises(expect) as info:
            main()
    return info.value.args[0]
