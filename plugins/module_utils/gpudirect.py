# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""How a node gets GPUDirect RDMA (the HCA reading and writing GPU memory), pure Python, no Ansible import.

There are two kernel paths, and which one can work depends on the node, not on the presence of a GPU and an HCA:

- DMA-BUF: the GPU driver exports GPU memory as a Linux dma-buf and the RDMA core imports it
  (``ibv_reg_dmabuf_mr``). NVIDIA's GPU Operator documentation ("GPUDirect RDMA and GPUDirect Storage",
  Common Prerequisites, NVIDIA/cloud-native-docs gpu-operator/gpu-operator-rdma.rst) lists for it: an Open
  Kernel module driver, CUDA 11.7 or higher, a Turing or newer GPU, Linux kernel 5.12 or higher, and
  "MLNX_OFED or DOCA-OFED are optional"; NVIDIA recommends it over nvidia-peermem. NCCL's requirements when
  it added the path (NVIDIA/nccl#682, NCCL 2.13): toolkit 11.7+, driver 515.43.04+ with the open modules,
  Turing+. The RDMA half needs Linux 5.12 (perplexityai/pplx-garden#3: on 5.10 libibverbs returns
  EPROTONOSUPPORT).
- nvidia-peermem: a peer-memory client that registers with ``ib_register_peer_memory_client``. That symbol
  is exported by MLNX_OFED/DOCA-OFED's ib_core (and by kernels that carry the peer-memory patch, such as
  Ubuntu's, ROCm/rccl#1218); the upstream ib_core of rdma-core distributions has none, and the module then
  fails to load with "nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err 0)"
  (Mellanox/nv_peer_memory#84; siderolabs/talos#12021 for nvidia-peermem on inbox drivers;
  NVIDIA/open-gpu-kernel-modules#630). ``grep ib_register_peer_memory_client /proc/kallsyms`` is the check
  the Mellanox maintainers ask for (Mellanox/nv_peer_memory#79).

NCCL reads ``NCCL_DMABUF_ENABLE`` (since 2.13, default 1, "automatically disabled if the Linux kernel or the
CUDA/NIC driver do not support it", NCCL environment variables documentation). Its fall-back from a failing
DMA-BUF registration to nvidia-peermem has not always worked ("Call to ibv_reg_dmabuf_mr failed with error
Operation not supported", NVIDIA/nccl#778, where the NCCL team answers "Try running with NCCL_DMABUF_ENABLE=0"),
so a peermem node is told 0 and a DMA-BUF node 1.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

METHODS = ("dmabuf", "peermem", "none")
PREFERENCES = ("auto",) + METHODS
FLAVOURS = ("open", "proprietary")
PEER_MEMORY_SYMBOL = "ib_register_peer_memory_client"
# GPU Operator documentation, Common Prerequisites: DMA-BUF needs "Linux Kernel 5.12 or higher".
DMABUF_MIN_KERNEL = (5, 12)

# The leading numbers of `uname -r`: Debian 6.1.0-26-amd64 and 6.12.48+deb13-amd64, Ubuntu 6.8.0-45-generic,
# EL 5.14.0-427.13.1.el9_4.x86_64, upstream 6.18.44-fc or 6.10-rc1.
_KERNEL_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


class GpuDirectError(ValueError):
    """An explicit interconnect_gpudirect preference the node cannot honour."""


def parse_kernel_release(release):
    """(major, minor, patch) of a kernel release string, or None when it does not start with numbers."""
    match = _KERNEL_RE.match(release or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def kernel_modules_flavour(proc_version_text):
    """'open', 'proprietary' or '' (no driver loaded) from /proc/driver/nvidia/version.

    The open modules print "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  <version> ...", the
    proprietary ones "NVRM version: NVIDIA UNIX x86_64 Kernel Module  <version> ...".
    """
    for line in (proc_version_text or "").splitlines():
        if line.startswith("NVRM version:"):
            return "open" if "Open Kernel Module" in line else "proprietary"
    return ""


def has_peer_memory_symbol(lines):
    """True when a /proc/kallsyms line names ib_register_peer_memory_client itself.

    ``lines`` is any iterable of lines (an open file is read one line at a time). Lines are
    "<address> <type> <name>[\\t[<module>]]"; __kstrtab_/__ksymtab_ entries and .cold parts do not count.
    """
    for line in lines:
        if PEER_MEMORY_SYMBOL not in line:
            continue
        fields = line.split()
        if len(fields) >= 3 and fields[2] == PEER_MEMORY_SYMBOL:
            return True
    return False


def module_loaded(proc_modules_text, name="nvidia_peermem"):
    """True when /proc/modules lists the module (its first field; modprobe's dashes are underscores there)."""
    name = name.replace("-", "_")
    return any(line.split()[:1] == [name] for line in (proc_modules_text or "").splitlines())


def ofed_summary(ofed_info_text):
    """The first line of `ofed_info -s` without its trailing colon ('' when there is no OFED)."""
    for line in (ofed_info_text or "").splitlines():
        if line.strip():
            return line.strip().rstrip(":")
    return ""


def _dmabuf_problems(kernel, flavour):
    problems = []
    if kernel is None:
        problems.append("the kernel release is not understood")
    elif kernel[:2] < DMABUF_MIN_KERNEL:
        problems.append("kernel %d.%d is older than 5.12" % kernel[:2])
    if flavour != "open":
        problems.append("the NVIDIA kernel modules are %s, not the open ones"
                        % (flavour or "not loaded"))
    return problems


def _peermem_problem(peer_memory_symbols, ofed):
    if peer_memory_symbols:
        return None
    if ofed:
        return ("/proc/kallsyms has no ib_register_peer_memory_client although %s is installed "
                "(is its ib_core the one loaded?)" % ofed)
    return ("/proc/kallsyms has no ib_register_peer_memory_client (the distribution's RDMA stack; "
            "only MLNX_OFED/DOCA-OFED's ib_core exports it)")


def choose_gpudirect(kernel_release, kernel_modules_flavour, peer_memory_symbols, ofed_version,
                     gpu_count, hca_count, preference="auto"):
    """Pick DMA-BUF, nvidia-peermem or nothing for GPUDirect RDMA.

    Returns {method, load_peermem, nccl_dmabuf, reason}. ``nccl_dmabuf`` is the NCCL_DMABUF_ENABLE value the
    node should have (True: 1, False: 0; meaningless for method none). An explicit preference that cannot
    work raises GpuDirectError; a node without a GPU or an HCA gets none whatever the preference, because
    there is nothing to connect.
    """
    if preference not in PREFERENCES:
        raise GpuDirectError("interconnect_gpudirect must be one of %s, not %r" % (", ".join(PREFERENCES), preference))
    kernel = parse_kernel_release(kernel_release)
    ofed = ofed_summary(ofed_version)

    def result(method, reason):
        return {"method": method, "load_peermem": method == "peermem", "nccl_dmabuf": method == "dmabuf",
                "reason": reason}

    missing = [what for what, count in (("NVIDIA GPU", gpu_count), ("RDMA HCA", hca_count)) if not int(count or 0)]
    if missing:
        return result("none", "no GPUDirect RDMA: the node has no %s." % " and no ".join(missing))
    if preference == "none":
        return result("none", "GPUDirect RDMA is turned off (interconnect_gpudirect: none).")

    dmabuf_problems = _dmabuf_problems(kernel, kernel_modules_flavour)
    peermem_problem = _peermem_problem(peer_memory_symbols, ofed)
    kernel_text = kernel_release or "unknown"

    if preference == "dmabuf" and dmabuf_problems:
        raise GpuDirectError("interconnect_gpudirect is dmabuf but DMA-BUF cannot work here: %s "
                             "(it needs Linux 5.12 or later and the open NVIDIA kernel modules)."
                             % "; ".join(dmabuf_problems))
    if preference == "peermem" and peermem_problem:
        raise GpuDirectError("interconnect_gpudirect is peermem but nvidia-peermem cannot load here: %s."
                             % peermem_problem)

    if preference in ("auto", "dmabuf") and not dmabuf_problems:
        return result("dmabuf", "DMA-BUF: kernel %s (5.12 or later) and the open NVIDIA kernel modules; "
                                "nvidia-peermem is not needed." % kernel_text)
    if preference in ("auto", "peermem") and not peermem_problem:
        source = ofed or "the running kernel"
        why = "" if preference == "peermem" else " (DMA-BUF not possible: %s)" % "; ".join(dmabuf_problems)
        return result("peermem", "nvidia-peermem: ib_core exports ib_register_peer_memory_client (%s)%s."
                                 % (source, why))
    return result("none", "no GPUDirect RDMA possible: DMA-BUF cannot work (%s) and nvidia-peermem cannot load "
                          "(%s); NCCL stages GPU data through host memory." % ("; ".join(dmabuf_problems), peermem_problem))
