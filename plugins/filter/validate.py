# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the validate role reads its workload runs (DDP, MPI) and compares the fleet's nodes with; the logic is in
plugin_utils/validate_runs and plugin_utils/fleet."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import fleet, validate_runs


class FilterModule(object):
    def filters(self):
        return {
            "mpi_hosts_for": validate_runs.mpi_hosts_for,
            "ddp_verdict": validate_runs.ddp_verdict,
            "mpi_verdict": validate_runs.mpi_verdict,
            "placement_verdict": validate_runs.placement_verdict,
            "validate_what_ran": validate_runs.what_ran,
            "node_profile": fleet.node_profile,
            "fleet_consistency": fleet.fleet_consistency,
            "pair_plan": fleet.pair_plan,
            "pair_runs": fleet.pair_runs,
            "bandwidth_verdict": fleet.bandwidth_verdict,
        }
