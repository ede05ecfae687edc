# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the MPI/UCX stack the interconnect role sets up; the logic lives in module_utils/mpi_stack.py.

gpufleet.cluster.ompi_path, ompi_version, ucx_build, ucx_config_dir, mpi_stack_layout and mpi_stack_env.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.filter_errors import as_filter

from ansible_collections.gpufleet.cluster.plugins.module_utils import mpi_stack


class FilterModule(object):
    def filters(self):
        return {
            "ompi_path": as_filter(mpi_stack.ompi_path),
            "ompi_version": as_filter(mpi_stack.ompi_version),
            "ucx_build": as_filter(mpi_stack.ucx_build),
            "ucx_config_dir": as_filter(mpi_stack.ucx_config_dir),
            "mpi_stack_layout": as_filter(mpi_stack.stack_layout),
            "mpi_stack_env": as_filter(mpi_stack.stack_env),
        }
