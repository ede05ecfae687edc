#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: placement_facts
short_description: Work out where each GPU of a node sits, for placing ranks next to it
version_added: "0.1.0"
description:
  - Returns the node's placement map as the C(gpufleet_placement) fact, the content of
    C(/etc/gpufleet/placement.json) (written by the interconnect role).
  - For each GPU, its index and UUID (C(nvidia-smi --query-gpu)), PCI address, NUMA node and local CPUs (in sysfs,
    the PCI device's C(numa_node) and C(local_cpulist); where the kernel gives the device no node, C(-1), the
    C(NUMA Affinity) of C(nvidia-smi topo -m), and where that lists several nodes, as on Grace (the CPU node with the
    CPU-less nodes of GPU memory), the one of them with CPUs), the nearest RDMA HCA(s) with their ports and the link
    class to them (C(PIX), C(PXB), C(PHB), C(NODE), C(SYS) as C(nvidia-smi topo -m) names them, worked out from the
    devices' PCI paths in sysfs, or taken from C(topo -m) where sysfs does not show a path), and its NVLink peers
    (from C(nvidia-smi topo -m)).
  - The NUMA nodes and their CPUs come from C(/sys/devices/system/node); a node without GPUs, or whose nvidia-smi
    does not answer, gets a map with no GPU and the reason in C(gpu_reason).
  - Reads only; never changes the node.
options:
  root:
    description:
      - Directory the sysfs paths are read under. Tests point it at a recorded tree.
    type: path
    default: /
  nvidia_smi_path:
    description:
      - The nvidia-smi to run, a command name looked up on C(PATH) or an absolute path.
    type: str
    default: nvidia-smi
  gpu_count:
    description:
      - How many NVIDIA GPUs the node has on its PCI bus (C(gpufleet_node.gpu_count)). With 0, nvidia-smi is not
        run at all.
    type: int
    required: true
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
"""

EXAMPLES = r"""
- name: Work out the placement map
  gpufleet.cluster.placement_facts:
    gpu_count: "{{ gpufleet_node.gpu_count }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet_placement:
      description:
        - The placement map. C(cpus) and each C(numa_nodes[].cpus) and C(gpus[].cpus) are kernel CPU lists.
          A GPU's C(numa_node) is null where the kernel gives the device none (one-socket hosts, many VMs); its
          C(cpus) are then its C(local_cpulist), else every CPU.
        - C(nearest_hcas) holds every HCA at the best link class found (two HCAs behind the GPU's PCIe switch are
          both listed); empty without HCAs.
      type: dict
      sample:
        version: 1
        numa_nodes: [{node: 0, cpus: "0-47,96-143"}, {node: 1, cpus: "48-95,144-191"}]
        cpus: "0-191"
        gpus:
          - index: 0
            uuid: GPU-2b5a6c3e-0f6d-4b56-9c1e-2f1b1f3c9a10
            pci_address: "0000:19:00.0"
            numa_node: 0
            cpus: "0-47,96-143"
            nearest_hcas: [{name: mlx5_0, link: PIX, netdevs: [ibp26s0], ports: [1], active_ports: [1]}]
            nvlink_peers: [1, 2, 3, 4, 5, 6, 7]
        gpu_reason: null
        hcas: [{name: mlx5_0, pci_address: "0000:1a:00.0", numa_node: 0}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi, placement, sysfs

C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}
QUERY = "index,name,uuid,pci.bus_id,memory.total,driver_version"


def read_gpus(module, nvidia_smi_path, gpu_count):
    """(GPU rows, topo -m parsed or None, reason when there are no rows)."""
    if gpu_count <= 0:
        return [], None, "no NVIDIA GPU on the PCI bus"
    binary = nvidia_smi.find_nvidia_smi(module, nvidia_smi_path)
    if not binary:
        return [], None, "nvidia-smi not found (%s)" % nvidia_smi_path
    rc, out, err = module.run_command([binary, "--query-gpu=" + QUERY, "--format=csv,noheader,nounits"],
                                      environ_update=C_LOCALE)
    if rc != 0:
        return [], None, "nvidia-smi failed (rc=%d): %s" % (rc, nvidia_smi.first_line(out, err) or "no output")
    try:
        gpus = nvidia_smi.parse_query_gpu(out)
    except ValueError as exc:
        module.fail_json(msg="cannot read nvidia-smi --query-gpu output: %s" % exc, stdout=out)
    topo = None
    rc, out, err = module.run_command([binary, "topo", "-m"], environ_update=C_LOCALE)
    if rc == 0:
        try:
            topo = nvidia_smi.parse_topo_matrix(out)
        except ValueError:
            topo = None
    return gpus, topo, None if gpus else "nvidia-smi lists no GPU"


def gather(module, root, nvidia_smi_path, gpu_count):
    gpus, topo, reason = read_gpus(module, nvidia_smi_path, gpu_count)
    addresses = [placement.pci_address(gpu.get("pci_bus_id")) for gpu in gpus]
    localities = dict((address, placement.read_pci_locality(root, placement.gpu_device(address)))
                      for address in addresses if address)
    hcas = sysfs.read_infiniband(root)
    hca_localities = dict((hca["name"], placement.read_pci_locality(root, placement.hca_device(hca["name"])))
                          for hca in hcas)
    return placement.build(gpus, localities, placement.read_numa_nodes(root), hcas, topo=topo,
                           hca_localities=hca_localities, gpu_reason=reason)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            gpu_count=dict(type="int", required=True),
        ),
        supports_check_mode=True,
    )
    facts = gather(module, module.params["root"], module.params["nvidia_smi_path"], module.params["gpu_count"])
    module.exit_json(changed=False, ansible_facts={"gpufleet_placement": facts})


if __name__ == "__main__":
    main()
