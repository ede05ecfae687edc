#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysctl_settings
short_description: Write a set of kernel settings to one sysctl.d file and apply the ones that differ
version_added: "0.1.0"
description:
  - Writes O(settings) as C(key=value) lines to one file under C(/etc/sysctl.d) and, with O(apply), sets every
    key whose live value under C(/proc/sys) differs. One call for the whole set; a no-op run reads the file
    and the live values and changes nothing.
  - Checks every key before changing anything. With O(apply), a key that has no C(/proc/sys) entry fails the
    task before anything is written; a value the kernel refuses fails it too, after the keys set before it
    are put back, and the file is not written. Nothing is half-applied.
  - Check mode reports what would change (the file and the keys to set); diff mode shows the file's change.
options:
  path:
    description: The sysctl.d file this module owns.
    type: path
    required: true
  settings:
    description: Kernel settings, key to value. Values are written as given (lists of numbers space-separated).
    type: dict
    required: true
  apply:
    description:
      - Set the live values too. Turn off where C(/proc/sys) belongs to another kernel (a container).
    type: bool
    default: true
  header:
    description: Comment lines written on top of the file.
    type: str
    default: "# Managed by gpufleet.cluster: local changes are overwritten."
  proc_root:
    description: Where C(/proc/sys) is read and written. Tests point it at a directory.
    type: path
    default: /proc/sys
author:
  - gpufleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Kernel settings, applied at once
  gpufleet.cluster.sysctl_settings:
    path: /etc/sysctl.d/60-gpufleet-hardening.conf
    settings:
      kernel.dmesg_restrict: 1
      net.ipv4.ip_local_port_range: "32768 60999"
"""

RETURN = r"""
file_changed:
  description: Whether the file was (or in check mode would be) rewritten.
  returned: always
  type: bool
applied:
  description: Keys whose live value was (or in check mode would be) set, with the value before.
  returned: always
  type: dict
  sample: {"kernel.dmesg_restrict": "0"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.atomic_file import refuse_untrusted, write_beside
from ansible_collections.gpufleet.cluster.plugins.module_utils.sysctl import normalize, proc_path, read_live


def render(settings, header):
    lines = (header or "").splitlines()
    lines += ["%s=%s" % (key, normalize(settings[key])) for key in sorted(settings)]
    return "\n".join(lines) + "\n"


def write_value(proc_root, key, value):
    with open(proc_path(proc_root, key), "w") as handle:
        handle.write(normalize(value) + "\n")


def plan(settings, proc_root, apply):
    """Return ({key: live value} to set, [keys without a /proc/sys entry]); nothing is changed here."""
    to_set, missing = {}, []
    if not apply:
        return to_set, missing
    for key in sorted(settings):
        live = read_live(proc_root, key)
        if live is None:
            missing.append(key)
            continue
        if live != normalize(settings[key]):
            to_set[key] = live
    return to_set, missing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            settings=dict(type="dict", required=True),
            apply=dict(type="bool", default=True),
            header=dict(type="str", default="# Managed by gpufleet.cluster: local changes are overwritten."),
            proc_root=dict(type="path", default="/proc/sys"),
        ),
        supports_check_mode=True,
    )
    path, settings, apply = module.params["path"], module.params["settings"], module.params["apply"]
    bad = sorted(key for key in settings if not key or "/" in key or key.startswith(".") or ".." in key)
    if bad:
        module.fail_json(msg="not sysctl keys: %s" % ", ".join(bad))

    refuse_untrusted(module, [path])
    wanted = render(settings, module.params["header"])
    try:
        with open(path) as handle:
            current = handle.read()
    except (IOError, OSError):
        current = None
    to_set, missing = plan(settings, module.params["proc_root"], apply)
    if missing:
        module.fail_json(msg="no such kernel settings under %s: %s (nothing was changed; load the module that "
                             "provides them first, or leave them out)" % (module.params["proc_root"], ", ".join(missing)),
                         missing=missing)

    file_changed = current != wanted
    result = dict(changed=file_changed or bool(to_set), file_changed=file_changed, applied=to_set, path=path)
    if module._diff and file_changed:
        result["diff"] = dict(before=current or "", after=wanted, before_header=path, after_header=path)
    if module.check_mode:
        module.exit_json(**result)

    proc_root = module.params["proc_root"]
    done = []
    for key in sorted(to_set):
        try:
            write_value(proc_root, key, settings[key])
        except (IOError, OSError) as exc:
            for earlier in reversed(done):  # put back what this run set: nothing half-applied
                try:
                    write_value(proc_root, earlier, to_set[earlier])
                except (IOError, OSError):
                    pass
            module.fail_json(msg="the kernel refused %s=%s (%s); the values set before it were put back and %s "
                                 "was not written" % (key, normalize(settings[key]), exc, path), **result)
        done.append(key)
    if file_changed:
        write_beside(module, path, wanted, mode=0o644)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
