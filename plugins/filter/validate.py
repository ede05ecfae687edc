# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters the validate role reads its workload runs (DDP, MPI) with; the logic is in plugin_utils/validate_runs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import validate_runs


class FilterModule(object):
    def filters(self):
        return {
            "mpi_hosts_for": validate_runs.mpi_hosts_for,
            "ddp_verdict": validate_runs.ddp_verdict,
            "mpi_verdict": validate_runs.mpi_verdict,
            "placement_verdict": validate_runs.placement_verdict,
            "validate_what_ran": validate_runs.what_ran,
        }
