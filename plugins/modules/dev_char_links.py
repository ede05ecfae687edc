#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dev_char_links
short_description: Make the /dev/char links of the NVIDIA device nodes
version_added: "0.1.0"
description:
  - Makes C(/dev/char/<major>:<minor>) a link to each NVIDIA character device node (C(/dev/nvidia*) and the nodes
    under C(/dev/nvidia-caps) and C(/dev/nvidia-caps-imex-channels)) where the link is missing or points elsewhere,
    what C(nvidia-ctk system create-dev-char-symlinks --create-all) does.
  - Without these links runc, under Docker's systemd cgroup driver, loses a running container's GPU devices at the
    next C(systemctl daemon-reload) ("Failed to initialize NVML, Unknown Error"); NVIDIA documents the links, and a
    udev rule that makes them again at boot, as the fix (nvidia-docker issue 1730).
  - Changes nothing when every link is there; a name under C(/dev/char) taken by something that is not a link is
    left alone and named in a warning.
options:
  dev:
    description: The device directory (a recorded tree in tests).
    type: path
    default: /dev
attributes:
  check_mode:
    description: Reports the links it would make.
    support: full
  diff_mode:
    description: None.
    support: none
author:
  - gpufleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Keep running GPU containers' devices through a daemon-reload
  gpufleet.cluster.dev_char_links:
"""

RETURN = r"""
links:
  description: The links made (in check mode, to be made), as C(<major>:<minor>) names with their targets.
  returned: always
  type: list
  elements: dict
  sample: [{name: "195:0", target: ../nvidia0}, {name: "195:255", target: ../nvidiactl}]
devices:
  description: How many NVIDIA device nodes were found.
  returned: always
  type: int
  sample: 10
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils.dev_char import link_plan, nvidia_devices


def main():
    module = AnsibleModule(argument_spec=dict(dev=dict(type="path", default="/dev")), supports_check_mode=True)
    dev = module.params["dev"]
    to_make, problems = link_plan(dev)
    for problem in problems:
        module.warn(problem)
    if to_make and not module.check_mode:
        char = os.path.join(dev, "char")
        try:
            if not os.path.isdir(char):
                os.mkdir(char, 0o755)
            for name, target in to_make:
                path = os.path.join(char, name)
                temporary = os.path.join(char, ".%s.gpufleet" % name)
                if os.path.lexists(temporary):
                    os.unlink(temporary)
                os.symlink(target, temporary)
                os.rename(temporary, path)  # replaces a wrong link in one step
        except OSError as error:
            module.fail_json(msg="cannot make the /dev/char links: %s" % error)
    module.exit_json(changed=bool(to_make), devices=len(nvidia_devices(dev)),
                     links=[dict(name=name, target=target) for name, target in to_make])


if __name__ == "__main__":
    main()
