"""The interconnect role's UCX/NCCL/MCA/hostfile templates, rendered with facts rdma_facts returns for the
recorded sysfs trees (tests/fixtures/sysfs/), so the HCA branches a container cannot reach are checked too.

Rendering uses Jinja2 with Ansible's template settings (trim_blocks on); `comment` is Ansible's filter.
"""
import os

import jinja2
import pytest

from ansible.plugins.filter.core import comment

from ansible_collections.gpufleet.cluster.plugins.modules import rdma_facts

from conftest import FIXTURES, ROOT

TEMPLATES = os.path.join(ROOT, "roles", "interconnect", "templates")
SYSFS = os.path.join(FIXTURES, "sysfs")


def render(name, **variables):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    base = dict(ansible_managed="Ansible managed", interconnect_ucx_tls="rc,ud,sm,self",
                interconnect_ucx_settings={}, interconnect_nccl_socket_ifname="^lo,docker",
                interconnect_nccl_settings={})
    base.update(variables)
    return env.get_template(name).render(**base)


def facts_for(tree):
    facts, _ = rdma_facts.run(dict(sysfs_root=os.path.join(SYSFS, tree) if tree else "/nonexistent",
                                   exclude_hcas=[], expect_hcas=None, expect_state=None,
                                   min_rate_gbps=None, link_layer=None, default_gid_index=3))
    return facts


def lines(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_no_hca_writes_no_hca_lines():
    rdma = facts_for(None)
    assert lines(render("ucx.conf.j2", gpufleet_rdma=rdma)) == []
    assert lines(render("nccl.conf.j2", gpufleet_rdma=rdma)) == ["NCCL_SOCKET_IFNAME=^lo,docker"]


def test_infiniband_node():
    rdma = facts_for("ib_port_down")
    assert lines(render("ucx.conf.j2", gpufleet_rdma=rdma)) == [
        "UCX_TLS=rc,ud,sm,self", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1"]
    assert lines(render("nccl.conf.j2", gpufleet_rdma=rdma)) == [
        "NCCL_SOCKET_IFNAME=^lo,docker", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"]


def test_roce_node_gets_the_gid_index_and_extra_settings():
    rdma = facts_for("roce_active")
    text = render("nccl.conf.j2", gpufleet_rdma=rdma, interconnect_nccl_settings={"NCCL_DEBUG": "WARN"})
    assert lines(text) == ["NCCL_SOCKET_IFNAME=^lo,docker", "NCCL_IB_HCA==mlx5_0:1",
                           "NCCL_IB_GID_INDEX=3", "NCCL_DEBUG=WARN"]
    assert text.startswith("#")


def test_mca_file_drops_null_overrides():
    rdma = facts_for("ib_ndr_active")
    text = render("openmpi-mca-params.conf.j2", gpufleet_rdma=rdma, __interconnect_ompi_major=5,
                  __interconnect_mca={"btl": "tcp,self,sm", "pml": "ucx", "osc": None})
    assert lines(text) == ["btl = tcp,self,sm", "pml = ucx"]
    assert "mlx5_0:1" in text


@pytest.mark.parametrize("hostvars, expected", [
    ({"n1": {"ansible_host": "10.0.0.1", "gpu_topology": {"gpu_count": 8}, "gpufleet_gpus_per_node": 4}},
     ["10.0.0.1 slots=8"]),
    ({"n1": {"ansible_host": "10.0.0.1", "gpufleet_cluster_address": "10.10.0.1", "gpufleet_gpus_per_node": 4}},
     ["10.10.0.1 slots=4"]),
    ({"n1": {"ansible_host": "10.0.0.1", "interconnect_slots_per_node": 2, "gpufleet_gpus_per_node": 4}},
     ["10.0.0.1 slots=2"]),
    ({"n1": {"gpufleet_node": {"gpu_count": 0}}}, ["n1 slots=1"]),
    ({"n1": {"gpufleet_node": {"gpu_count": 8}}, "n2": {"ansible_host": "n2.example"}},
     ["n1 slots=8", "n2.example slots=1"]),
])
def test_hostfile_slots_and_addresses(hostvars, expected):
    text = render("hostfile.j2", interconnect_hostfile_hosts=list(hostvars), hostvars=hostvars,
                  interconnect_slots_per_node=0)
    assert lines(text) == expected
