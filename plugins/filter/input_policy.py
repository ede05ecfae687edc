# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the roles' first check tasks use to refuse bad input before any change; the work is done in
plugin_utils/input_policy.py (pure functions).

Each filter's documentation is plugins/filter/<filter name>.yml (ansible-doc -t filter gpufleet.cluster.<name>).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import input_policy
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter


@as_filter
def input_problems(settings, kind, optional=False):
    return input_policy.value_problems(settings, kind, bool(optional))


@as_filter
def network_problems(settings, *, wide_networks=None, wide_setting="gpufleet_wide_networks", trust=True, optional=False):
    return input_policy.network_problems(settings, wide_networks or [], wide_setting, bool(trust), bool(optional))


@as_filter
def root_group_problems(groups, root_groups=None):
    return input_policy.root_group_problems(groups, root_groups or [])


@as_filter
def training_user_groups(current, groups=None, root_groups=None):
    return input_policy.training_user_groups(current, groups or [], root_groups or [])


class FilterModule(object):
    def filters(self):
        return {
            "input_problems": input_problems,
            "network_problems": network_problems,
            "root_group_problems": root_group_problems,
            "training_user_groups": training_user_groups,
        }
