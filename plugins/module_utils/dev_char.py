# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The /dev/char links of the NVIDIA device nodes (no Ansible import).

runc, under Docker's systemd cgroup driver, looks a container's devices up through /dev/char/<major>:<minor>. udev
makes those links for devices it creates, but the NVIDIA device nodes are made by nvidia-modprobe or the driver
itself, without udev, so their links are missing; the next `systemctl daemon-reload` then makes systemd re-apply
the container's device rules without them, and running GPU containers fail with "Failed to initialize NVML: Unknown
Error" (NVIDIA's notice in nvidia-docker issue 1730, nvidia-container-toolkit issues 48 and 251). The fix NVIDIA
documents is the links for every NVIDIA device node, made again at boot by a udev rule that runs
`nvidia-ctk system create-dev-char-symlinks --create-all`. This reads what links are missing or wrong.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

# The device nodes NVIDIA's driver stack makes, as nvidia-ctk's create-dev-char-symlinks finds them: /dev/nvidia*
# (GPUs, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-nvswitch*, nvidia-nvlink) and the
# capability nodes under /dev/nvidia-caps and /dev/nvidia-caps-imex-channels.
CAP_DIRS = ("nvidia-caps", "nvidia-caps-imex-channels")


def nvidia_devices(dev="/dev", lstat=os.lstat, listdir=os.listdir):
    """[(path relative to dev, major, minor)] of every NVIDIA character device node, sorted by path."""
    found = []
    try:
        names = listdir(dev)
    except OSError:
        return found
    candidates = [name for name in names if name.startswith("nvidia") and name not in CAP_DIRS]
    for folder in CAP_DIRS:
        try:
            candidates += [os.path.join(folder, name) for name in listdir(os.path.join(dev, folder))]
        except OSError:
            pass
    for relative in candidates:
        try:
            info = lstat(os.path.join(dev, relative))
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            found.append((relative, os.major(info.st_rdev), os.minor(info.st_rdev)))
    return sorted(found)


def wanted_links(devices):
    """{"<major>:<minor>": link target relative to /dev/char} for the devices."""
    return dict(("%d:%d" % (major, minor), os.path.join("..", relative)) for relative, major, minor in devices)


def link_plan(dev="/dev", lstat=os.lstat, listdir=os.listdir, readlink=os.readlink):
    """(to_make, problems): the links under dev/char that are missing or point elsewhere, as [(name, target)] in
    name order, and the names taken by something that is not a link (left alone and reported)."""
    to_make, problems = [], []
    char = os.path.join(dev, "char")
    for name, target in sorted(wanted_links(nvidia_devices(dev, lstat, listdir)).items()):
        path = os.path.join(char, name)
        try:
            info = lstat(path)
        except OSError:
            to_make.append((name, target))
            continue
        if not stat.S_ISLNK(info.st_mode):
            problems.append("%s exists and is not a link" % path)
        elif readlink(path) != target:
            to_make.append((name, target))
    return to_make, problems
