#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Read the GPU topology with nvidia-smi and check it against expectations
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi --query-gpu), C(nvidia-smi topo -m), C(nvidia-smi nvlink -s) and C(nvidia-smi -q) and
    returns the GPUs (index, name, UUID, PCI bus id, memory, NUMA node, CPU affinity, NVLink counts), the NICs,
    the link matrix, the NVSwitch fabric state of every GPU and a one-line summary as the C(gpu_topology) fact.
  - "The fabric state (the C(Fabric) section of C(nvidia-smi -q)) is judged in C(gpu_topology.fabric.verdict):
    on a node with NVSwitches (O(nvswitch)) every GPU must report State C(Completed) and Status C(Success);
    C(In Progress) or C(Not Started) mean the fabric manager has not finished or is not running. Without
    NVSwitches, without a GPU, or where the driver prints no fabric state (C(N/A)), the verdict is C(skipped)
    with the reason. The fabric verdict is not one of the RV(violations)."
  - "Checks the topology against expectations given as options or through a named O(profile). Every
    violated expectation becomes one line such as C(GPU3<->GPU5: SYS, expected NV18)."
  - On a node without nvidia-smi, or where nvidia-smi cannot talk to a driver (a GPU-less host), it
    returns C(gpu_count=0) with the reason, and fails only when the expectations ask for GPUs.
  - Reads only; never changes the node.
options:
  nvidia_smi_path:
    description:
      - The nvidia-smi to run, a command name looked up on C(PATH) or an absolute path.
    type: str
    default: nvidia-smi
  profile:
    description:
      - A named set of expectations. Options given explicitly override the profile's values.
      - C(hgx-h100-8) 8 H100 on NVSwitch, all pairs C(NV18), 7 NVLink peers, a NIC within C(PXB) of each
        GPU on its NUMA node, driver branch 535 or newer.
      - C(hgx-a100-8) the same for 8 A100 with C(NV12).
      - C(dgx1-v100) 8 V100 with NVLink to at least 4 peers (hybrid cube-mesh), driver branch 535 or newer.
      - C(pcie) no NVLink expected; every GPU has a NIC within C(NODE) (its own NUMA node), driver branch
        535 or newer.
    type: str
    choices: [hgx-h100-8, hgx-a100-8, dgx1-v100, pcie]
  gpu_count:
    description:
      - Exact number of GPUs expected. C(0) accepts a node without GPUs.
    type: int
  gpu_model:
    description:
      - Regular expression every GPU name must match (searched, not anchored), for example C(H100).
    type: str
  min_driver_branch:
    description:
      - Lowest acceptable driver branch, the major part of the driver version (C(535) for C(535.183.01)).
    type: int
  all_pairs_link:
    description:
      - The worst link allowed between any two GPUs, ordered C(NV) > C(PIX) > C(PXB) > C(PHB) > C(NODE) > C(SYS).
      - C(NV) means any NVLink, C(NV18) NVLink with at least 18 links.
    type: str
  nvlink_peers_min:
    description:
      - Every GPU must have NVLink to at least this many other GPUs.
    type: int
  nic_max_distance:
    description:
      - Every GPU must have a NIC at most this far away in the link matrix.
    type: str
    choices: [PIX, PXB, PHB, NODE, SYS]
  gpu_nic_same_numa:
    description:
      - Every GPU must have a NIC on its own NUMA node, that is a NIC not reached over C(SYS).
    type: bool
  nvswitch:
    description:
      - Whether the node has NVSwitches (C(gpufleet_node.nvswitch) of C(gpufleet.cluster.node_facts)). With
        C(true) the fabric state of every GPU is checked; unset (unknown) or C(false) the fabric verdict is
        C(skipped).
    type: bool
  fail_on_violation:
    description:
      - Fail the task when an expectation is violated. With C(false) the violations are only reported
        in RV(violations) and in the fact.
    type: bool
    default: true
author:
  - gpufleet contributors (!UNKNOWN)
notes:
  - Supports check mode; it only reads.
  - Expectations about NICs use the matrix from C(nvidia-smi topo -m), where NICs show as C(NIC0..) (with
    the C(NIC Legend) naming the device) or, with older drivers, as C(mlx5_N) columns.
"""

EXAMPLES = r"""
- name: Read the GPU topology
  gpufleet.cluster.gpu_topology:

- name: Require an HGX H100 board
  gpufleet.cluster.gpu_topology:
    profile: hgx-h100-8

- name: Require 4 GPUs with NVLink to every peer, report only
  gpufleet.cluster.gpu_topology:
    gpu_count: 4
    all_pairs_link: NV
    fail_on_violation: false
  register: gpu_topology_check

- name: Read the topology and check the NVSwitch fabric state on an HGX node
  gpufleet.cluster.gpu_topology:
    profile: hgx-h100-8
    nvswitch: "{{ gpufleet_node.nvswitch }}"

- name: Use an nvidia-smi outside PATH
  gpufleet.cluster.gpu_topology:
    nvidia_smi_path: /usr/local/nvidia/bin/nvidia-smi
    profile: pcie
    nic_max_distance: PIX
"""

RETURN = r"""
violations:
  description: One line per violated expectation; empty when every expectation holds.
  returned: always
  type: list
  elements: str
  sample: ["GPU3<->GPU5: SYS, expected NV18", "GPU4: no NIC on its NUMA node (nearest mlx5_0 (NIC0) at SYS)"]
expectations:
  description: The expectations checked, after merging the profile with the explicit options.
  returned: always
  type: dict
  sample: {gpu_count: 8, all_pairs_link: NV18}
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_topology:
      description: The GPU topology of the node.
      type: dict
      contains:
        gpu_count:
          description: Number of GPUs nvidia-smi lists; C(0) without nvidia-smi or driver.
          type: int
        reason:
          description: Why there is no GPU (nvidia-smi missing, or its first line of error); null with GPUs.
          type: str
        driver_version:
          description: Driver version nvidia-smi reports.
          type: str
        summary:
          description: One line describing the node.
          type: str
        gpus:
          description: One entry per GPU.
          type: list
          elements: dict
        gpu_columns:
          description: GPU columns of the link matrix in order.
          type: list
          elements: str
        nics:
          description: NIC columns of the link matrix in order (C(NIC0..) or C(mlx5_N)).
          type: list
          elements: str
        nic_names:
          description: NIC column to device name, from the NIC legend.
          type: dict
        nic_devices:
          description: NIC columns with their device names.
          type: list
          elements: dict
        links:
          description: The link matrix, C(links[a][b]) is the printed code (C(X), C(NV18), C(PIX), ..).
          type: dict
        affinity_columns:
          description: Which affinity columns the driver printed.
          type: list
          elements: str
        topology_error:
          description: Why the link matrix is missing, when it is.
          type: str
        fabric:
          description:
            - The NVSwitch fabric state from C(nvidia-smi -q).
            - C(gpus) one entry per GPU (index, bus_id, fabric (section printed), state, status, clique_id,
              cluster_uuid, health); C(error) why C(nvidia-smi -q) could not be read (null otherwise);
              C(verdict) C({status, reason, detail}) with status C(passed), C(failed) or C(skipped).
          type: dict
          sample:
            gpus:
              - {index: 0, bus_id: "00000000:18:00.0", fabric: true, state: Completed, status: Success,
                 clique_id: "0", cluster_uuid: "00000000-0000-0000-0000-000000000000", health: {bandwidth: N/A}}
            error: null
            verdict: {status: passed, reason: "8 GPU(s): fabric Completed/Success, clique 0, cluster ...", detail: {}}
        violations:
          description: Same as RV(violations).
          type: list
          elements: str
      sample:
        gpu_count: 8
        reason: null
        driver_version: "570.133.20"
        summary: "8x NVIDIA H100 80GB HBM3, all pairs NV18, 8 NICs at PIX"
        gpus:
          - {index: 0, name: "NVIDIA H100 80GB HBM3", uuid: "GPU-...", pci_bus_id: "00000000:18:00.0",
             memory_total_mib: 81559, driver_version: "570.133.20", cpu_affinity: "0-47,96-143",
             numa_affinity: "0", numa_node: 0, nearest_nic: mlx5_0, nearest_nic_link: PIX, nvlink_peers: 7,
             nvlinks_active: 18, nvlinks_inactive: 0}
        gpu_columns: [GPU0, GPU1]
        nics: [NIC0, NIC1]
        nic_names: {NIC0: mlx5_0, NIC1: mlx5_1}
        links: {GPU0: {GPU0: X, GPU1: NV18, NIC0: PIX}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import nvidia_smi
from ansible_collections.gpufleet.cluster.plugins.module_utils import topology_policy

QUERY_FIELDS = "index,name,uuid,pci.bus_id,memory.total,driver_version"
C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


def read_fabric(module, binary, topology, nvswitch):
    """The ``fabric`` entry of the fact: every GPU's Fabric section of ``nvidia-smi -q`` and its verdict.

    nvidia-smi -q runs only where the node has GPUs; its failure is the verdict's error, not the module's.
    """
    gpus = []
    error = None
    count = topology.get("gpu_count") or 0
    if binary and count:
        rc, out, err = module.run_command([binary, "-q"], environ_update=C_LOCALE)
        if rc != 0:
            error = "nvidia-smi -q failed (rc=%d): %s" % (rc, nvidia_smi.first_line(err, out) or "no output")
        else:
            gpus = nvidia_smi.parse_fabric(out)
    verdict = nvidia_smi.fabric_verdict(gpus, nvswitch, gpu_count=count, reason=topology.get("reason") or "",
                                        error=error or "")
    return {"gpus": gpus, "error": error, "verdict": verdict}


def read_topology(module, nvidia_smi_path, binary=None):
    """Run nvidia-smi and return the assembled topology dict (gpu_count 0 with a reason on failure)."""
    if binary is None:
        binary = nvidia_smi.find_nvidia_smi(module, nvidia_smi_path)
    if not binary:
        return topology_policy.assemble([], reason="nvidia-smi not found (%s)" % nvidia_smi_path)

    rc, out, err = module.run_command(
        [binary, "--query-gpu=" + QUERY_FIELDS, "--format=csv,noheader,nounits"], environ_update=C_LOCALE)
    if rc != 0:
        return topology_policy.assemble(
            [], reason="nvidia-smi failed (rc=%d): %s" % (rc, nvidia_smi.first_line(out, err) or "no output"))
    try:
        gpus = nvidia_smi.parse_query_gpu(out)
    except ValueError as exc:
        module.fail_json(msg="cannot read nvidia-smi --query-gpu output: %s" % exc, stdout=out)
    if not gpus:
        return topology_policy.assemble([], reason="nvidia-smi lists no GPU")

    topo = None
    topology_error = None
    rc, out, err = module.run_command([binary, "topo", "-m"], environ_update=C_LOCALE)
    if rc != 0:
        topology_error = "nvidia-smi topo -m failed (rc=%d): %s" % (rc, nvidia_smi.first_line(out, err) or "no output")
    else:
        try:
            topo = nvidia_smi.parse_topo_matrix(out)
        except ValueError as exc:
            topology_error = "cannot read nvidia-smi topo -m output: %s" % exc

    nvlink = None
    rc, out, err = module.run_command([binary, "nvlink", "-s"], environ_update=C_LOCALE)
    if rc == 0:
        nvlink = nvidia_smi.parse_nvlink_status(out)
    return topology_policy.assemble(gpus, topo, nvlink, topology_error=topology_error)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            profile=dict(type="str", choices=sorted(topology_policy.PROFILES)),
            gpu_count=dict(type="int"),
            gpu_model=dict(type="str"),
            min_driver_branch=dict(type="int"),
            all_pairs_link=dict(type="str"),
            nvlink_peers_min=dict(type="int"),
            nic_max_distance=dict(type="str", choices=list(topology_policy.NIC_DISTANCES)),
            gpu_nic_same_numa=dict(type="bool"),
            nvswitch=dict(type="bool"),
            fail_on_violation=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    expectations = topology_policy.resolve_expectations(
        params["profile"], **dict((key, params[key]) for key in topology_policy.EXPECTATION_KEYS))
    problems = topology_policy.validate_expectations(expectations)
    if problems:
        module.fail_json(msg="invalid GPU topology expectations: %s" % "; ".join(problems))

    binary = nvidia_smi.find_nvidia_smi(module, params["nvidia_smi_path"])
    topology = read_topology(module, params["nvidia_smi_path"], binary or "")
    violations = topology_policy.check(topology, expectations)
    topology["violations"] = violations
    topology["fabric"] = read_fabric(module, binary, topology, params["nvswitch"])
    result = dict(changed=False, violations=violations, expectations=expectations,
                  ansible_facts={"gpu_topology": topology})
    if violations and params["fail_on_violation"]:
        module.fail_json(
            msg="GPU topology does not meet expectations (%s):\n%s" % (topology["summary"], "\n".join(violations)),
            **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
