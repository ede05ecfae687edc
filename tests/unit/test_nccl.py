"""NCCL_DEBUG=INFO readers in plugin_utils/nccl.py over real logs (tests/fixtures/nccl), and the busbw_floor filter
(plugins/filter/topology.py)."""
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.filter import topology as topology_filter
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import nccl
from ansible_collections.gpufleet.cluster.plugins.module_utils import topology_policy

from conftest import FIXTURES as ALL_FIXTURES, fixture_parts

FIXTURES = os.path.join(ALL_FIXTURES, "nccl")


def load(name):
    """Return the published log of a fixture, without its source header."""
    header, body = fixture_parts("nccl", name)
    assert header[0].startswith("# source: https://github.com/"), "%s does not name its source" % name
    return body


def parsed(version=None, net=None, ib_devices=(), gdrdma=None, intra=(), warnings=0, nranks=None,
           info_lines=0):
    return {"version": version, "net": net, "ib_devices": list(ib_devices), "gdrdma": gdrdma,
            "intra": list(intra), "warnings": warnings, "nranks": nranks, "info_lines": info_lines}


# name: (every field parse_nccl_debug returns, the summary line), checked against the log by hand
CASES = {
    "ib-dgx1-v100-nccl-2.3.7.log": (
        parsed(version="2.3.7", net="IB", ib_devices=["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"],
               nranks=8, info_lines=13),
        "NCCL 2.3.7, net IB (mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1), 8 ranks"),
    "socket-aws-64ranks-nccl-2.4.7.log": (
        parsed(version="2.4.7", net="Socket", gdrdma=False, nranks=64, info_lines=47),
        "NCCL 2.4.7, net Socket, GPUDirect RDMA off, 64 ranks"),
    "ib-gdrdma-a100-nccl-2.7.6.log": (
        parsed(version="2.7.6", net="IB",
               ib_devices=["mlx5_8:1", "mlx5_9:1", "mlx5_10:1", "mlx5_11:1", "mlx5_12:1", "mlx5_14:1",
                           "mlx5_15:1", "mlx5_16:1", "mlx5_17:1"],
               gdrdma=True, info_lines=18),
        "NCCL 2.7.6, net IB (mlx5_8:1, mlx5_9:1, mlx5_10:1, mlx5_11:1, mlx5_12:1, mlx5_14:1, mlx5_15:1, "
        "mlx5_16:1, mlx5_17:1), GPUDirect RDMA on"),
    "roce-ibext-p2p-cumem-nvls-capable.log": (
        parsed(net="IB", ib_devices=["mlx5_%d:1" % index for index in range(8)], intra=["P2P"],
               info_lines=51),
        "NCCL (version not printed), net IB (mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1, mlx5_4:1, mlx5_5:1, "
        "mlx5_6:1, mlx5_7:1), intra-node P2P"),
    "ibext-nvls-p2p-cumem-64ranks.log": (
        parsed(net="IB", gdrdma=False, intra=["NVLS", "P2P"], nranks=64, info_lines=50),
        "NCCL (version not printed), net IB, GPUDirect RDMA off, intra-node NVLS+P2P, 64 ranks"),
    "socket-fallback-ibext-no-ib-device-16ranks.log": (
        parsed(net="Socket", gdrdma=False, intra=["P2P"], nranks=16, info_lines=45),
        "NCCL (version not printed), net Socket, GPUDirect RDMA off, intra-node P2P, 16 ranks"),
    "efa-aws-libfabric-gdrdma-h200-nccl-2.23.4.log": (
        parsed(version="2.23.4", net="OFI", gdrdma=True, info_lines=4),
        "NCCL 2.23.4, net OFI, GPUDirect RDMA on"),
    "ofi-aws-libfabric-efa-horovod-warn.log": (
        parsed(net="OFI", gdrdma=False, intra=["P2P"], warnings=1, info_lines=11),
        "NCCL (version not printed), net OFI, GPUDirect RDMA off, intra-node P2P, 1 NCCL WARN line"),
    "ib-shm-nvswitch-0-nvls-channels.log": (
        parsed(net="IB", ib_devices=["mlx5_0:1", "mlx5_2:1"], intra=["SHM"], info_lines=36),
        "NCCL (version not printed), net IB (mlx5_0:1, mlx5_2:1), intra-node SHM"),
    "socket-rtx5090-no-ib-device-nccl-2.26.2.log": (
        parsed(version="2.26.2", net="Socket", nranks=2, info_lines=13),
        "NCCL 2.26.2, net Socket, 2 ranks"),
}


def test_every_fixture_is_covered_and_names_its_source():
    names = sorted(name for name in os.listdir(FIXTURES) if name.endswith(".log"))
    assert names == sorted(CASES)
    for name in names:
        assert load(name).strip(), name


def test_fixtures_cover_several_nccl_versions():
    versions = set(expected["version"] for expected, _unused in CASES.values()) - set([None])
    assert len(versions) >= 3, versions


@pytest.mark.parametrize("name", sorted(CASES))
def test_parse_fixture(name):
    expected, _unused = CASES[name]
    assert nccl.parse_nccl_debug(load(name)) == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_summary_of_fixture(name):
    _unused, line = CASES[name]
    assert nccl.transport_summary(nccl.parse_nccl_debug(load(name))) == line


def test_filter_names():
    assert sorted(topology_filter.FilterModule().filters()) == ["busbw_floor"]


def test_crlf_bytes_and_mpi_tags_give_the_same_result():
    text = load("ib-gdrdma-a100-nccl-2.7.6.log")
    expected = nccl.parse_nccl_debug(text)
    assert nccl.parse_nccl_debug(text.replace("\n", "\r\n")) == expected
    assert nccl.parse_nccl_debug(text.encode("utf-8")) == expected
    tagged = "".join("[1,0]<stdout>:" + line + "\n" for line in text.splitlines())
    assert nccl.parse_nccl_debug(tagged) == expected


def test_rdma_port_listing_beats_the_socket_listing_nccl_2_4_prints_on_every_run():
    # Both lines from https://github.com/Mellanox/nv_peer_memory/issues/56 (NCCL 2.4.7, IB in use).
    text = ("master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>\n"
            "master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>\n")
    result = nccl.parse_nccl_debug(text)
    assert (result["net"], result["ib_devices"], result["gdrdma"]) == ("IB", ["mlx5_0:1"], None)


def test_plugin_loader_line_names_no_network():
    # From https://github.com/NVIDIA/nccl-tests/issues/244: the plugin loader, not a network.
    result = nccl.parse_nccl_debug(
        "ranokau:398189:398189 [0] NCCL INFO NET/Plugin: Using internal network plugin.\n")
    assert (result["net"], result["info_lines"]) == (None, 1)


@pytest.mark.parametrize("name, kind", [
    ("IB", "IB"), ("IBext", "IB"), ("IBext_v8", "IB"), ("Socket", "Socket"), ("AWS Libfabric", "OFI"),
    ("Libfabric", "OFI"), ("OFI", "OFI"), ("FasTrak", "FasTrak"), ("", None), (None, None),
])
def test_net_kind(name, kind):
    assert nccl.net_kind(name) == kind


@pytest.mark.parametrize("text", [None, "", "NCCL version 2.18.1+cuda12.1\n", "Traceback (most recent call last):\n"])
def test_output_without_nccl_info_is_reported_missing(text):
    result = nccl.parse_nccl_debug(text)
    assert result["info_lines"] == 0
    problems = nccl.transport_problems(result, 8, True)
    assert len(problems) == 1 and problems[0].startswith("NCCL_DEBUG=INFO output missing")
    assert nccl.transport_summary(result) == "no NCCL_DEBUG=INFO output"


@pytest.mark.parametrize("value", [None, {}])
def test_no_parse_result_is_reported_missing(value):
    assert nccl.transport_problems(value, 0, False)[0].startswith("NCCL_DEBUG=INFO output missing")
    assert nccl.transport_summary(value) == "no NCCL_DEBUG=INFO output"


def test_socket_fallback_with_active_rdma_ports_fails():
    result = nccl.parse_nccl_debug(load("socket-fallback-ibext-no-ib-device-16ranks.log"))
    problems = nccl.transport_problems(result, 8, True)
    assert len(problems) == 1
    assert problems[0].startswith("NCCL used TCP sockets although 8 RDMA ports are active")
    assert nccl.transport_problems(result, "8", False) == problems


def test_socket_with_one_active_port_fails_even_on_one_node():
    result = nccl.parse_nccl_debug(load("socket-rtx5090-no-ib-device-nccl-2.26.2.log"))
    problems = nccl.transport_problems(result, 1, False)
    assert len(problems) == 1
    assert problems[0].startswith("NCCL used TCP sockets although 1 RDMA port is active")


def test_sockets_without_rdma_ports_are_no_problem():
    result = nccl.parse_nccl_debug(load("socket-aws-64ranks-nccl-2.4.7.log"))
    assert nccl.transport_problems(result, 0, True) == []


@pytest.mark.parametrize("name", [
    "ib-gdrdma-a100-nccl-2.7.6.log", "roce-ibext-p2p-cumem-nvls-capable.log", "ibext-nvls-p2p-cumem-64ranks.log",
    "efa-aws-libfabric-gdrdma-h200-nccl-2.23.4.log", "ib-dgx1-v100-nccl-2.3.7.log",
])
def test_rdma_transports_pass_on_a_multi_node_run(name):
    assert nccl.transport_problems(nccl.parse_nccl_debug(load(name)), 8, True) == []


def test_multi_node_run_without_network_line_fails():
    # Only the init lines of a real 64-rank log: NCCL INFO is there, no line names the network.
    lines = [line for line in load("socket-aws-64ranks-nccl-2.4.7.log").splitlines() if "Init COMPLETE" in line]
    result = nccl.parse_nccl_debug("\n".join(lines))
    assert (result["net"], result["nranks"], result["info_lines"]) == (None, 64, 2)
    problems = nccl.transport_problems(result, 8, True)
    assert len(problems) == 1 and problems[0].startswith("No NCCL network transport was reported")
    assert nccl.transport_problems(result, 8, False) == []
    assert nccl.transport_summary(result) == "NCCL (version not printed), no network transport seen, 64 ranks"


@pytest.mark.parametrize("ports", ["many", -1, [1]])
def test_bad_port_count_is_refused(ports):
    result = nccl.parse_nccl_debug(load("ib-gdrdma-a100-nccl-2.7.6.log"))
    with pytest.raises(ValueError, match="active_rdma_ports"):
        nccl.transport_problems(result, ports, True)


def test_summary_of_a_full_result():
    result = parsed(version="2.18.1", net="IB", ib_devices=["mlx5_0:1", "mlx5_1:1"], gdrdma=True,
                    intra=["P2P", "SHM"], nranks=16, info_lines=120)
    assert nccl.transport_summary(result) == \
        "NCCL 2.18.1, net IB (mlx5_0:1, mlx5_1:1), GPUDirect RDMA on, intra-node P2P+SHM, 16 ranks"


def test_busbw_floor_filter_is_the_policy_function():
    for profile in sorted(topology_policy.BUSBW_FLOORS_GBPS) + ["unknown", None]:
        for scope in ("node", "fleet", "rack"):
            assert topology_filter.busbw_floor(profile, scope) == topology_policy.busbw_floor(profile, scope)
    assert topology_filter.busbw_floor("hgx-h100-8") == topology_policy.busbw_floor("hgx-h100-8", "node") == 250.0
