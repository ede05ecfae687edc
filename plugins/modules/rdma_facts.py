#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Read InfiniBand/RoCE HCAs from sysfs and check them against expectations
version_added: "0.1.0"
description:
  - Reads every RDMA device under C(/sys/class/infiniband) (the HCA's PCI address and NUMA node, its
    netdevs, and per port C(state), C(phys_state), C(rate), C(link_layer) and the RoCE v2 GID index that
    carries an IPv4 address) and returns them as the C(gpufleet_rdma) fact.
  - Runs no external binary; needs neither rdma-core nor a driver stack beyond the kernel's.
  - When expectations are given, fails with one line per port that misses any of them, naming what was
    expected and what the port shows.
options:
  sysfs_root:
    description:
      - Directory that stands for C(/) when reading C(sys/class/infiniband) (the fact reads
        C(<sysfs_root>/sys/class/infiniband)). Tests point it at a recorded tree.
    type: path
    default: /
  exclude_hcas:
    description:
      - HCA names (for example C(mlx5_1)) left out of the selection, the summary and the checks, such as an
        Ethernet NIC kept for storage.
    type: list
    elements: str
    default: []
  expect_hcas:
    description:
      - Number of selected HCAs the node must have.
    type: int
  expect_state:
    description:
      - Logical state every selected port must be in.
    type: str
    choices: [ACTIVE, INIT, ARMED, DOWN]
  min_rate_gbps:
    description:
      - Lowest acceptable port rate in Gb/s (C(400) for NDR, C(200) for HDR).
    type: float
  link_layer:
    description:
      - Link layer every selected port must have.
    type: str
    choices: [InfiniBand, Ethernet]
  management_hcas:
    description:
      - HCA names that carry storage or in-band management rather than training traffic. They are left out of
        the selection (and so of NCCL_IB_HCA, UCX_NET_DEVICES and the checks) and reported under
        C(management_hcas).
    type: list
    elements: str
    default: []
  management_device_ids:
    description:
      - PCI device ids (C(device/device) in sysfs) of HCAs treated as management/storage HCAs. The default
        lists the BlueField DPUs (C(0xa2d2) BlueField, C(0xa2d6) BlueField-2, C(0xa2dc) BlueField-3,
        C(0xa2df) BlueField-4), which on NVSwitch systems such as DGX B200 carry storage and in-band
        management next to the ConnectX-7 (C(0x1021)) compute HCAs. Set C([]) where BlueField-3 SuperNICs
        are the compute fabric.
    type: list
    elements: str
    default: ["0xa2d2", "0xa2d6", "0xa2dc", "0xa2df"]
  default_gid_index:
    description:
      - GID index reported for RoCE ports when no RoCE v2 IPv4 GID is populated yet (the interface has
        no address). C(3) is the RoCE v2 IPv4 entry on ConnectX adapters with one IPv4 address.
    type: int
    default: 3
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
"""

EXAMPLES = r"""
- name: Read the RDMA devices
  gpufleet.cluster.rdma_facts:

- name: Require eight active 400 Gb/s InfiniBand HCAs
  gpufleet.cluster.rdma_facts:
    expect_hcas: 8
    expect_state: ACTIVE
    min_rate_gbps: 400
    link_layer: InfiniBand

- name: Keep a ConnectX-7 storage NIC out of NCCL/UCX as well as the BlueField DPUs
  gpufleet.cluster.rdma_facts:
    management_hcas: [mlx5_8]

- name: Check the RoCE rails, leaving out the storage NIC
  gpufleet.cluster.rdma_facts:
    exclude_hcas: [mlx5_bond_0]
    expect_state: ACTIVE
    link_layer: Ethernet
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet_rdma:
      description: The RDMA devices and what the interconnect configuration needs from them.
      type: dict
      contains:
        hcas:
          description: Selected HCAs with their ports.
          type: list
          elements: dict
          sample:
            - name: mlx5_0
              pci_address: "0000:1a:00.0"
              numa_node: 0
              netdevs: [ibp26s0]
              pci_vendor_id: "0x15b3"
              pci_device_id: "0x1021"
              model: ConnectX-7
              role: compute
              role_reason: null
              ports:
                - {port: 1, name: "mlx5_0:1", state: ACTIVE, phys_state: LinkUp, rate_gbps: 400.0,
                   rate: "400 Gb/sec (4X NDR)", link_layer: InfiniBand, netdev: null, roce_v2_ipv4_gid_index: null}
        excluded:
          description: Names of HCAs found but left out by I(exclude_hcas).
          type: list
          elements: str
        management:
          description: Names of the management/storage HCAs (I(management_hcas), I(management_device_ids)).
          type: list
          elements: str
          sample: [mlx5_2]
        management_hcas:
          description: The management/storage HCAs, with their ports and C(role_reason); not in C(hcas).
          type: list
          elements: dict
        hca_count:
          description: Number of selected HCAs.
          type: int
          sample: 8
        port_count:
          description: Number of ports on the selected HCAs.
          type: int
        active_port_count:
          description: Ports in state ACTIVE.
          type: int
        infiniband:
          description: Some selected port has the InfiniBand link layer.
          type: bool
        roce:
          description: Some selected port has the Ethernet link layer (RoCE).
          type: bool
        link_layers:
          description: Link layers of the selected ports.
          type: list
          elements: str
        ports:
          description: C(<hca>:<port>) of every selected port, as UCX_NET_DEVICES names them.
          type: list
          elements: str
          sample: ["mlx5_0:1", "mlx5_1:1"]
        nccl_ib_hca:
          description: NCCL_IB_HCA value naming exactly the selected ports; null without HCAs.
          type: str
          sample: "=mlx5_0:1,mlx5_1:1"
        nccl_ib_gid_index:
          description: RoCE v2 IPv4 GID index for NCCL_IB_GID_INDEX; null without RoCE ports.
          type: int
          sample: 3
problems:
  description: One line per expectation missed (empty when all are met).
  returned: always
  type: list
  elements: str
  sample: ["mlx5_1 port 1 (0000:3c:00.0): expected state ACTIVE; found state DOWN (phys Disabled)"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import rdma


def run(params):
    """Return (facts, problems) for the module parameters (pure except for sysfs reads)."""
    found = rdma.gather(params["sysfs_root"])
    selected, excluded = rdma.select(found, params["exclude_hcas"])
    selected, management = rdma.split_management(
        selected, params.get("management_hcas"), params.get("management_device_ids", rdma.MANAGEMENT_DEVICE_IDS))
    facts = rdma.summarize(selected, default_gid_index=params["default_gid_index"])
    facts["hcas"] = selected
    facts["excluded"] = [h["name"] for h in excluded]
    facts["management"] = [h["name"] for h in management]
    facts["management_hcas"] = management
    problems = rdma.check(
        selected,
        expect_hcas=params["expect_hcas"],
        expect_state=params["expect_state"],
        min_rate_gbps=params["min_rate_gbps"],
        link_layer=params["link_layer"],
    )
    return facts, problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/"),
            exclude_hcas=dict(type="list", elements="str", default=[]),
            expect_hcas=dict(type="int"),
            expect_state=dict(type="str", choices=["ACTIVE", "INIT", "ARMED", "DOWN"]),
            min_rate_gbps=dict(type="float"),
            link_layer=dict(type="str", choices=list(rdma.LINK_LAYERS)),
            default_gid_index=dict(type="int", default=3),
            management_hcas=dict(type="list", elements="str", default=[]),
            management_device_ids=dict(type="list", elements="str", default=list(rdma.MANAGEMENT_DEVICE_IDS)),
        ),
        supports_check_mode=True,
    )
    facts, problems = run(module.params)
    if problems:
        module.fail_json(
            msg="RDMA expectations not met:\n" + "\n".join(problems),
            problems=problems,
            ansible_facts={"gpufleet_rdma": facts},
        )
    module.exit_json(changed=False, problems=[], ansible_facts={"gpufleet_rdma": facts})


if __name__ == "__main__":
    main()
