"""The interconnect role's UCX/NCCL/fabric.env/MCA/hostfile templates, rendered with facts rdma_facts returns for
the recorded sysfs trees (tests/fixtures/sysfs/) and ucx_facts' decision on real ucx_info outputs
(tests/fixtures/ucx/), so the HCA and CUDA branches a container cannot reach are checked too.

The NCCL and UCX settings are worked out in the `vars:` of the role's own task that writes the files
(tasks/config.yml, "Write the OpenMPI, PRRTE, UCX and NCCL configuration, ..."; its NCCL and UCX settings), evaluated
here with Ansible's Templar; rendering uses Jinja2 with Ansible's template settings (trim_blocks on); `comment` is
Ansible's filter.
"""
import os
import re

import jinja2
import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.filter.core import comment
from ansible.template import Templar

from ansible_collections.gpufleet.cluster.plugins.module_utils import ucx
from ansible_collections.gpufleet.cluster.plugins.modules import rdma_facts

from conftest import FIXTURES, ROOT, fixture_parts

ROLE = os.path.join(ROOT, "roles", "interconnect")
TEMPLATES = os.path.join(ROLE, "templates")
SYSFS = os.path.join(FIXTURES, "sysfs")
SETTINGS_TASK = ("Write the OpenMPI, PRRTE, UCX and NCCL configuration, the fabric environment, the memlock limit "
                 "and the profile")
SETTINGS = ("__interconnect_nccl_ifname_source", "__interconnect_nccl_env", "__interconnect_ucx_env")
ROUTES = ("10.10.0.0/16 dev ens10f0np0 proto kernel scope link src 10.10.0.11\n"
          "10.10.0.0/16 dev ens10f1np1 proto kernel scope link src 10.10.1.11\n")
ENV_LINE = re.compile(r"^(NCCL|UCX)_[A-Z0-9_]+=[^\"'\s]+$")


def role_defaults():
    return DataLoader().load_from_file(os.path.join(ROLE, "defaults", "main.yml"))


def facts_for(tree, **overrides):
    args = dict(sysfs_root=os.path.join(SYSFS, tree) if tree else "/nonexistent", exclude_hcas=[],
                expect_hcas=None, expect_state=None, min_rate_gbps=None, link_layer=None, default_gid_index=3)
    args.update(overrides)
    facts, _unused = rdma_facts.run(args)
    return facts


def ucx_fact(version="debian13-ucx-1.18.1-v.txt", devices="debian13-ucx-1.18.1-d.txt", **kwargs):
    return ucx.decide(fixture_parts("ucx", version)[1], fixture_parts("ucx", devices)[1], **kwargs)


def node_vars(gpufleet_rdma, **variables):
    defaults = role_defaults()
    values = dict(
        ansible_managed="Ansible managed", inventory_hostname="node1",
        interconnect_ucx_tls=defaults["interconnect_ucx_tls"], interconnect_ucx_settings={},
        interconnect_nccl_socket_ifname=defaults["interconnect_nccl_socket_ifname"],
        interconnect_nccl_socket_ifname_fallback=defaults["interconnect_nccl_socket_ifname_fallback"],
        interconnect_nccl_settings={}, interconnect_cluster_network="",
        # The role's default is the shared setting (roles/gpufleet_defaults).
        interconnect_fabric_env_path=DataLoader().load_from_file(os.path.join(
            ROLE, "..", "gpufleet_defaults", "defaults", "main.yml"))["gpufleet_fabric_env_path"],
        gpufleet_rdma=gpufleet_rdma, gpufleet_ucx=ucx_fact(), gpufleet_gpudirect={"method": "none", "nccl_dmabuf": False})
    values.update(variables)
    return values


def computed(values):
    """What the role's configuration task works out for these variables."""
    loader = DataLoader()
    tasks = loader.load_from_file(os.path.join(ROLE, "tasks", "config.yml"), trusted_as_template=True)
    task = next(t for t in tasks if t["name"] == SETTINGS_TASK)
    settings = dict(task["vars"])
    variables = dict(settings)
    variables.update(values)
    return Templar(loader=loader, variables=variables).template({name: settings[name] for name in SETTINGS})


FABRIC_TEMPLATES = ("nccl.conf.j2", "ucx.conf.j2", "fabric.env.j2")


def render(name, **variables):
    """Render one template; for the three fabric files given only facts (gpufleet_rdma, ...), the node's other
    variables come from the role's defaults and the settings from the role's configuration task."""
    if name in FABRIC_TEMPLATES and "__interconnect_nccl_env" not in variables:
        variables = node_vars(**variables)
        variables.update(computed(variables))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    return env.get_template(name).render(**variables)


def node_files(rdma, **variables):
    return {name[:-3]: render(name, gpufleet_rdma=rdma, **variables) for name in FABRIC_TEMPLATES}


def lines(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_no_hca_and_no_cluster_network_gets_the_fallback():
    files = node_files(facts_for(None))
    assert lines(files["ucx.conf"]) == []
    assert lines(files["nccl.conf"]) == ["NCCL_SOCKET_IFNAME=^lo,docker"]
    assert "# NCCL_SOCKET_IFNAME: fallback: no cluster network is set" in files["nccl.conf"]
    assert lines(files["fabric.env"]) == ["NCCL_SOCKET_IFNAME=^lo,docker"]


def test_cluster_network_interfaces_are_matched_exactly():
    files = node_files(facts_for("ib_ndr_active"), interconnect_cluster_network="10.10.0.0/16",
                       __interconnect_cluster_routes={"stdout": ROUTES})
    assert lines(files["nccl.conf"]) == ["NCCL_SOCKET_IFNAME==ens10f0np0,ens10f1np1", "NCCL_IB_HCA==mlx5_0:1"]
    assert ("# NCCL_SOCKET_IFNAME: the interfaces that carry the cluster network 10.10.0.0/16 "
            "(ip -o -4 route show root 10.10.0.0/16).") in files["nccl.conf"]


def test_cluster_network_on_no_interface_gets_the_fallback():
    files = node_files(facts_for(None), interconnect_cluster_network="10.10.0.0/16",
                       __interconnect_cluster_routes={"stdout": ""})
    assert lines(files["nccl.conf"]) == ["NCCL_SOCKET_IFNAME=^lo,docker"]
    assert "fallback: no interface of this node carries the cluster network 10.10.0.0/16" in files["fabric.env"]


def test_explicit_socket_ifname_wins():
    files = node_files(facts_for(None), interconnect_nccl_socket_ifname="=bond0",
                       interconnect_cluster_network="10.10.0.0/16", __interconnect_cluster_routes={"stdout": ROUTES})
    assert lines(files["nccl.conf"]) == ["NCCL_SOCKET_IFNAME==bond0"]
    assert "set by interconnect_nccl_socket_ifname" in files["nccl.conf"]


def test_infiniband_node_without_cuda_in_ucx():
    files = node_files(facts_for("ib_port_down"))
    assert lines(files["ucx.conf"]) == ["UCX_TLS=rc,ud,sm,self", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1"]
    assert "# UCX_TLS: no CUDA transport added: cuda_copy, cuda_ipc: this UCX build has no CUDA support" in files["ucx.conf"]
    assert lines(files["nccl.conf"]) == ["NCCL_SOCKET_IFNAME=^lo,docker", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"]


def test_cuda_ucx_build_gets_its_transports():
    fact = ucx_fact("rhel8-ucx-1.16.0-cuda-gdrcopy-v.txt", "rhel8-ucx-1.16.0-cuda-gdrcopy-d-excerpt.txt")
    files = node_files(facts_for("ib_ndr_active"), gpufleet_ucx=fact)
    assert lines(files["ucx.conf"])[0] == "UCX_TLS=rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy"
    assert "UCX_TLS=rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy" in lines(files["fabric.env"])


def test_operator_ucx_tls_wins():
    fact = ucx_fact("rhel8-ucx-1.16.0-cuda-gdrcopy-v.txt", "rhel8-ucx-1.16.0-cuda-gdrcopy-d-excerpt.txt",
                    operator_tls="rc_x,cuda")
    files = node_files(facts_for("ib_ndr_active"), gpufleet_ucx=fact,
                       interconnect_ucx_settings={"UCX_TLS": "rc_x,cuda", "UCX_NET_DEVICES": None})
    assert lines(files["ucx.conf"]) == ["UCX_TLS=rc_x,cuda"]
    assert "UCX_NET_DEVICES" not in files["fabric.env"]


def test_roce_node_gets_the_gid_index_dmabuf_and_extra_settings():
    files = node_files(facts_for("roce_active"), interconnect_nccl_settings={"NCCL_DEBUG": "WARN"},
                       gpufleet_gpudirect={"method": "dmabuf", "nccl_dmabuf": True})
    assert lines(files["nccl.conf"]) == ["NCCL_SOCKET_IFNAME=^lo,docker", "NCCL_IB_HCA==mlx5_0:1",
                                         "NCCL_IB_GID_INDEX=3", "NCCL_DMABUF_ENABLE=1", "NCCL_DEBUG=WARN"]
    assert files["nccl.conf"].startswith("#")


def test_peermem_node_and_an_override_of_dmabuf():
    rdma = facts_for("roce_active")
    peermem = {"method": "peermem", "nccl_dmabuf": False}
    assert "NCCL_DMABUF_ENABLE=0" in lines(node_files(rdma, gpufleet_gpudirect=peermem)["nccl.conf"])
    files = node_files(rdma, gpufleet_gpudirect=peermem, interconnect_nccl_settings={"NCCL_DMABUF_ENABLE": None})
    assert "NCCL_DMABUF_ENABLE" not in files["nccl.conf"]


def test_management_hca_stays_out_of_nccl_and_ucx():
    files = node_files(facts_for("nvswitch_cx7_bf3"))
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in lines(files["nccl.conf"])
    assert "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1" in lines(files["ucx.conf"])
    assert "mlx5_2" not in files["fabric.env"]
    assert "NCCL_IB_GID_INDEX" not in files["fabric.env"]


@pytest.mark.parametrize("tree", [None, "ib_ndr_active", "roce_active", "nvswitch_cx7_bf3"])
def test_fabric_env_is_an_env_file_with_the_settings_of_both_files(tree):
    files = node_files(facts_for(tree), interconnect_cluster_network="10.10.0.0/16",
                       __interconnect_cluster_routes={"stdout": ROUTES},
                       interconnect_ucx_settings={"UCX_WARN_UNUSED_ENV_VARS": "n"},
                       gpufleet_gpudirect={"method": "dmabuf", "nccl_dmabuf": True} if tree else {"method": "none"})
    env = lines(files["fabric.env"])
    assert env == lines(files["nccl.conf"]) + lines(files["ucx.conf"])
    assert env and all(ENV_LINE.match(line) for line in env), env
    assert all(line.startswith("#") for line in files["fabric.env"].splitlines() if not ENV_LINE.match(line))
    assert "docker run --env-file /etc/gpufleet/fabric.env" in files["fabric.env"]


def test_mca_file_drops_null_overrides():
    rdma = facts_for("ib_ndr_active")
    text = render("openmpi-mca-params.conf.j2", ansible_managed="Ansible managed", gpufleet_rdma=rdma,
                  __interconnect_ompi_major=5,
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
    text = render("hostfile.j2", ansible_managed="Ansible managed", interconnect_hostfile_hosts=list(hostvars),
                  hostvars=hostvars, interconnect_slots_per_node=0)
    assert lines(text) == expected
