# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The controller's own name resolution, for the filters that build trust lists (trusted_addresses,
hosts_without_address, cluster_known_hosts).

A node the inventory names by DNS name only is trusted at the addresses the controller resolves its name to, never at
the address the node reports about itself. The pure functions of plugin_utils/cluster.py take this as their
``resolve`` argument, so unit tests give them a resolver of their own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket


def controller_addresses(name):
    """Every IPv4 and IPv6 address the controller resolves ``name`` to (the system resolver: /etc/hosts, DNS),
    without zone suffix, in resolver order and each once; [] when it does not resolve."""
    try:
        answers = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError):
        return []
    found = []
    for _family, _type, _proto, _canonname, sockaddr in answers:
        address = str(sockaddr[0]).split("%", 1)[0]
        if address not in found:
            found.append(address)
    return found
