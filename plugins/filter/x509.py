# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Certificate checks made on the controller, in the worker that templates the task (no module call).

Each filter's documentation is plugins/filter/<filter name>.yml (ansible-doc -t filter gpufleet.cluster.<name>).
This file carries no DOCUMENTATION: ansible-doc would show it for every filter here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import re

from ansible.errors import AnsibleFilterError

try:
    from cryptography import x509
    HAS_CRYPTOGRAPHY = True
except ImportError:  # pragma: no cover - the controller's requirements install it
    HAS_CRYPTOGRAPHY = False

PEM_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----")


def certificate_problem(pem):
    """'' when every certificate of the PEM text parses and none has expired, else why not, in one sentence."""
    return certificate_problem_at(pem, datetime.datetime.now(datetime.timezone.utc))


def certificate_problem_at(pem, now):
    """certificate_problem as of ``now`` (an aware datetime)."""
    if not HAS_CRYPTOGRAPHY:
        raise AnsibleFilterError("certificate_problem needs the Python package cryptography on the controller")
    blocks = PEM_BLOCK.findall(pem or "")
    if not blocks:
        return "it holds no PEM certificate"
    for number, block in enumerate(blocks, 1):
        where = "" if len(blocks) == 1 else "certificate %d of %d " % (number, len(blocks))
        try:
            cert = x509.load_pem_x509_certificate(block.encode("ascii"))
        except ValueError as exc:
            return "%sdoes not parse (%s)" % (where, exc)
        not_after = getattr(cert, "not_valid_after_utc", None)
        if not_after is None:  # cryptography < 42
            not_after = cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
        if not_after <= now:
            return "%sexpired on %s" % (where, not_after.strftime("%Y-%m-%d %H:%M:%S UTC"))
    return ""


class FilterModule(object):
    def filters(self):
        return {"certificate_problem": certificate_problem}
