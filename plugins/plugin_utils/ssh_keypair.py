# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Whether the cluster key pair on the controller is as community.crypto.openssh_keypair would leave it, read
without changing anything (the filter gpufleet.cluster.ssh_keypair_drift).

cluster_ssh runs openssh_keypair (type ed25519, a comment, mode 0600) only when this finds a difference, so that a
run over a settled controller starts no module process for it. The reading is stricter than the module's, never
looser: whatever the module would regenerate, restore or chmod counts as a difference here, and so does anything
this reading cannot judge (another owner, a link, a key it cannot parse).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

try:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
except ImportError:  # ansible-core depends on cryptography; without it every key pair goes to the module
    serialization = Ed25519PrivateKey = None

OPENSSH_PRIVATE_HEADER = b"-----BEGIN OPENSSH PRIVATE KEY-----"


def _file_problem(path, mode):
    """Why path is not a regular file of this user with exactly mode; None when it is."""
    try:
        path_stat = os.lstat(path)
    except OSError as exc:
        return "%s cannot be read: %s" % (path, exc.strerror)
    if not stat.S_ISREG(path_stat.st_mode):
        return "%s is not a regular file" % path
    if path_stat.st_uid != os.geteuid():
        return "%s belongs to uid %d, not to this user" % (path, path_stat.st_uid)
    if stat.S_IMODE(path_stat.st_mode) != mode:
        return "%s has mode %04o, not %04o" % (path, stat.S_IMODE(path_stat.st_mode), mode)
    return None


def keypair_drift(path, comment, mode=0o600):
    """Every difference between the ed25519 key pair at path (and path.pub) and what openssh_keypair makes with
    this comment and mode; [] when there is none.

    As asked: both files regular files of this user with mode (the module gives both the same mode); the private
    key an unencrypted ed25519 key in OpenSSH's own format; the .pub file that key's public half with exactly this
    comment.
    """
    if serialization is None:
        return ["the cryptography library is missing on the controller: openssh_keypair has to judge"]
    if not isinstance(path, str) or not os.path.isabs(path):
        return ["%r is not an absolute path" % (path,)]
    if isinstance(mode, str):
        mode = int(mode, 8)
    problems = [problem for problem in (_file_problem(path, mode), _file_problem(path + ".pub", mode)) if problem]
    if problems:
        return problems
    with open(path, "rb") as handle:
        private = handle.read()
    with open(path + ".pub", "rb") as handle:
        public = handle.read().decode("utf-8", "replace")
    try:
        if not private.lstrip().startswith(OPENSSH_PRIVATE_HEADER):
            raise ValueError("not in OpenSSH's format")
        key = serialization.load_ssh_private_key(private, password=None)
    except (TypeError, ValueError) as exc:  # a passphrase, a damaged key or another format
        return ["%s is not an unencrypted OpenSSH private key (%s)" % (path, exc)]
    except Exception as exc:  # pylint: disable=broad-except  # UnsupportedAlgorithm and the like: let the module say
        return ["%s cannot be read as a key: %s" % (path, exc)]
    if not isinstance(key, Ed25519PrivateKey):
        return ["%s is not an ed25519 key" % path]
    wanted = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    fields = public.strip().split(None, 2)
    if fields[:2] != wanted.decode("ascii").split():
        return ["%s.pub does not hold the public half of %s" % (path, path)]
    found_comment = fields[2] if len(fields) > 2 else ""
    if found_comment != (comment or ""):
        return ["%s.pub has the comment %r, not %r" % (path, found_comment, comment)]
    return []
