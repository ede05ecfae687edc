"""The Open MPI MCA, NCCL and UCX settings interconnect wrote, and that the stack reads them."""
import pytest

from fleet import key_value_lines

PROFILE = "[ -r /etc/profile.d/gpufleet-mpi.sh ] && . /etc/profile.d/gpufleet-mpi.sh; "


def compute_hcas(node, ic):
    """The node's RDMA HCAs that carry compute traffic: /sys/class/infiniband less the excluded ones and the
    management ones (named, or by PCI device id), as interconnect selects them."""
    out = node.run("for d in /sys/class/infiniband/*; do [ -e \"$d\" ] || continue; "
                   "printf '%s %s\\n' \"${d##*/}\" \"$(cat \"$d/device/device\" 2>/dev/null)\"; done").stdout
    hcas = []
    for line in out.splitlines():
        name, _sep, device = line.partition(" ")
        if name in ic["exclude_hcas"] or name in ic["management_hcas"] or device.strip() in ic["management_device_ids"]:
            continue
        hcas.append(name)
    return hcas


def cluster_interfaces(node, network):
    """The interfaces that carry the cluster network (what NCCL_SOCKET_IFNAME names)."""
    out = node.check("ip -o -4 route show root %s scope link", network)
    found = []
    for line in out.splitlines():
        fields = line.split()
        if "dev" in fields and fields[fields.index("dev") + 1] not in found:
            found.append(fields[fields.index("dev") + 1])
    return found


def _settings(values):
    """A settings dict as the templates write it: null values left out, the rest as text."""
    return {key: str(value) for key, value in values.items() if value is not None}


@pytest.fixture(scope="module")
def ic(expect):
    return expect["interconnect"]


@pytest.fixture(scope="module")
def sysconfdir(node):
    out = node.check(PROFILE + "ompi_info --path sysconfdir")
    return out.split(":", 1)[1].strip()


def test_openmpi_mca_params(node, ic, sysconfdir):
    path = sysconfdir + "/openmpi-mca-params.conf"
    mca = key_value_lines(node.read(path))
    assert mca, "%s: %s is missing or empty" % (node.name, path)
    hcas = compute_hcas(node, ic)
    assert {"tcp", "self"} <= set(mca.get("btl", "").split(",")), mca.get("btl")
    overrides = ic["mca_params"]
    if "pml" not in overrides:
        want = "ucx" if hcas else "ob1"
        assert mca.get("pml") == want, "%s: pml is %s with %d compute HCA(s) %s" % (
            node.name, mca.get("pml"), len(hcas), hcas)
    if ic["cluster_network"]:
        assert mca.get("btl_tcp_if_include") == ic["cluster_network"], mca
    else:
        assert mca.get("btl_tcp_if_exclude") == ic["tcp_if_exclude"], mca
    for key, value in overrides.items():
        if value is None:
            assert key not in mca, "%s: %s is set, interconnect_mca_params removes it" % (node.name, key)
        else:
            assert mca.get(key) == str(value), "%s: %s = %s, interconnect_mca_params says %s" % (
                node.name, key, mca.get(key), value)
    # Open MPI itself reads the file: the value it reports for the TCP interfaces, and where it got it.
    key = "btl_tcp_if_include" if "btl_tcp_if_include" in mca else "btl_tcp_if_exclude"
    out = node.check(PROFILE + "ompi_info --parsable --level 9 --param btl tcp")
    reported = {line.split(":")[5]: line.split(":", 6)[6] for line in out.splitlines()
                if line.startswith("mca:btl:tcp:param:%s:" % key) and line.count(":") >= 6}
    assert reported.get("value") == mca[key], "%s: Open MPI reports %s = %s, %s says %s" % (
        node.name, key, reported.get("value"), path, mca[key])
    assert reported.get("source", "").startswith("file (%s:" % path), (
        "%s: Open MPI took %s from %s, not %s" % (node.name, key, reported.get("source"), path))


def expected_nccl_ifname(node, ic):
    if ic["nccl_socket_ifname"]:
        return ic["nccl_socket_ifname"]
    interfaces = cluster_interfaces(node, ic["cluster_network"]) if ic["cluster_network"] else []
    return "=" + ",".join(interfaces) if interfaces else ic["nccl_socket_ifname_fallback"]


def test_nccl_conf(node, ic):
    nccl = key_value_lines(node.read("/etc/nccl.conf"))
    assert nccl, "%s: /etc/nccl.conf is missing or empty" % node.name
    want = _settings(ic["nccl_settings"])
    want.setdefault("NCCL_SOCKET_IFNAME", expected_nccl_ifname(node, ic))
    for key, value in want.items():
        assert nccl.get(key) == value, "%s: /etc/nccl.conf has %s=%s, want %s" % (node.name, key, nccl.get(key), value)
    hcas = compute_hcas(node, ic)
    if hcas:
        assert nccl.get("NCCL_IB_HCA", "").lstrip("=").split(",")[0].split(":")[0] in hcas, nccl.get("NCCL_IB_HCA")
    else:
        assert "NCCL_IB_HCA" not in nccl or "NCCL_IB_HCA" in want, "%s: NCCL_IB_HCA without an HCA" % node.name


def test_ucx_settings_in_effect(node, ic):
    """ucx_info -c prints the configuration UCX runs with (its file, then the environment, then defaults)."""
    effective = key_value_lines(node.check(PROFILE + "ucx_info -c"))
    fabric = key_value_lines(node.read(ic["fabric_env"]))
    want = _settings(ic["ucx_settings"])
    hcas = compute_hcas(node, ic)
    if hcas:
        assert fabric.get("UCX_NET_DEVICES"), "%s: no UCX_NET_DEVICES with HCAs %s" % (node.name, hcas)
        want.setdefault("UCX_NET_DEVICES", fabric["UCX_NET_DEVICES"])
        want.setdefault("UCX_TLS", fabric.get("UCX_TLS", ""))
        assert all(dev.split(":")[0] in hcas for dev in want["UCX_NET_DEVICES"].split(",")), want
    else:
        assert "UCX_NET_DEVICES" not in fabric or "UCX_NET_DEVICES" in want, fabric
        assert "UCX_TLS" not in fabric or "UCX_TLS" in want, fabric
    for key, value in want.items():
        assert effective.get(key) == value, "%s: UCX runs with %s=%s, want %s" % (
            node.name, key, effective.get(key), value)


def test_fabric_env_matches_the_files(node, ic):
    """The container environment file holds what nccl.conf (and, with HCAs, the UCX settings) hold, and only
    root can write it (the launcher refuses it otherwise)."""
    path = ic["fabric_env"]
    owner = node.check("stat -c '%%U:%%G %%a' -- %s", path).split()
    assert owner[0] == "root:root" and int(owner[1], 8) & 0o022 == 0, "%s: %s is %s" % (node.name, path, owner)
    fabric = key_value_lines(node.read(path))
    nccl = key_value_lines(node.read("/etc/nccl.conf"))
    assert {k: v for k, v in fabric.items() if k.startswith("NCCL_")} == nccl, (
        "%s: %s and /etc/nccl.conf differ: %s / %s" % (node.name, path, fabric, nccl))
    assert set(fabric) - set(nccl) <= {"UCX_TLS", "UCX_NET_DEVICES"} | set(ic["ucx_settings"]), fabric
