#!/usr/bin/env bash
# Capture what gpufleet reads on a real GPU node, for test fixtures and bug reports.
#
#   scripts/capture-gpu-node.sh OUTDIR
#
# Writes OUTDIR/capture.tar.gz holding, one file each: the nvidia-smi outputs the modules parse
# (--query-gpu in the module's field order, topo -m, nvlink -s), nvidia-smi -q and -q -x, -L,
# /proc/driver/nvidia/version, a copy of the NVIDIA PCI devices' sysfs attributes and of
# /sys/class/infiniband, and meta.txt (date, kernel, driver). Where ansible-core is importable it also
# runs gpufleet.cluster.gpu_topology, node_facts, rdma_facts and gpudirect_facts on localhost from this checkout,
# and, where python3 has torch with CUDA, the validate role's DDP/NCCL check on every local GPU (NCCL_DEBUG=INFO
# with the INIT and NET subsystems: which transport NCCL chose). The fabric part adds ibv_devinfo -v, ibstat,
# ucx_info -v/-d/-b, ompi_info --path all, the peer-memory symbols and modules, the RDMA sysfs attributes and
# nvidia-smi --query-compute-apps.
# Changes nothing on the node: it only reads (and the DDP check allocates GPU memory while it runs).
set -u
out=${1:?usage: capture-gpu-node.sh OUTDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
cap=$work/capture
mkdir -p "$cap" "$out"
export LC_ALL=C.UTF-8 LANG=C.UTF-8 LANGUAGE=C  # ansible needs a UTF-8 locale; numbers stay C

run() {  # run NAME CMD...: stdout+stderr to NAME.txt, exit status to NAME.rc
    local name=$1; shift
    "$@" >"$cap/$name.txt" 2>&1
    echo $? >"$cap/$name.rc"
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kernel: $(uname -r)"
    echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    echo "nvidia-smi: $(command -v nvidia-smi || echo missing)"
    nvidia-smi --version 2>&1 | sed 's/^/  /'
} >"$cap/meta.txt"

run query-gpu nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version \
    --format=csv,noheader,nounits
# The nvidia_driver role's GPU policy and persistence check (plugin_utils/gpu_policy.py QUERY_FIELDS).
run query-gpu-policy nvidia-smi \
    --query-gpu=index,pci.bus_id,persistence_mode,power.limit,power.min_limit,power.max_limit,clocks.applications.memory,clocks.applications.graphics,ecc.mode.current,ecc.mode.pending \
    --format=csv,noheader,nounits
run list nvidia-smi -L
run topo-m nvidia-smi topo -m
run nvlink-s nvidia-smi nvlink -s
run smi nvidia-smi
run smi-q nvidia-smi -q
run smi-q-x nvidia-smi -q -x
run proc-driver-version cat /proc/driver/nvidia/version
# What nvidia_driver_state reads: the kernels, the module per kernel, DKMS, the persistence daemon's unit.
run uname-r uname -r
run lib-modules ls /lib/modules
run modinfo-nvidia modinfo -F version nvidia
run dkms-status dkms status
run persistenced-unit systemctl cat nvidia-persistenced.service

# sysfs: every NVIDIA PCI function's attributes the modules read, and the RDMA class tree.
sys=$cap/sysfs
for dev in /sys/bus/pci/devices/*; do
    [ "$(cat "$dev/vendor" 2>/dev/null)" = 0x10de ] || continue
    d=$sys/sys/bus/pci/devices/$(basename "$dev")
    mkdir -p "$d"
    for attr in vendor device class numa_node local_cpulist current_link_speed current_link_width max_link_speed \
        max_link_width; do
        [ -r "$dev/$attr" ] && cat "$dev/$attr" >"$d/$attr" 2>/dev/null
    done
    [ -L "$dev/driver" ] && basename "$(readlink "$dev/driver")" >"$d/driver.name"
done
ls -la /sys/class/infiniband >"$cap/sys-class-infiniband.txt" 2>&1
# What rdma_facts reads per HCA and port (PCI ids, NUMA node, state, rate, link layer, GID table), as files.
for hca in /sys/class/infiniband/*; do
    [ -d "$hca" ] || continue
    h=$sys/sys/class/infiniband/$(basename "$hca")
    mkdir -p "$h/device"
    for attr in vendor device subsystem_device numa_node; do
        [ -r "$hca/device/$attr" ] && cat "$hca/device/$attr" >"$h/device/$attr" 2>/dev/null
    done
    readlink -f "$hca/device" >"$h/device.path" 2>/dev/null
    for f in node_type fw_ver hca_type board_id; do
        [ -r "$hca/$f" ] && cat "$hca/$f" >"$h/$f" 2>/dev/null
    done
    for port in "$hca"/ports/*; do
        p=$h/ports/$(basename "$port")
        mkdir -p "$p/gids" "$p/gid_attrs/types" "$p/gid_attrs/ndevs"
        for attr in state phys_state rate link_layer; do
            cat "$port/$attr" >"$p/$attr" 2>/dev/null
        done
        for gid in "$port"/gids/*; do
            i=$(basename "$gid")
            cat "$gid" >"$p/gids/$i" 2>/dev/null
            cat "$port/gid_attrs/types/$i" >"$p/gid_attrs/types/$i" 2>/dev/null
            cat "$port/gid_attrs/ndevs/$i" >"$p/gid_attrs/ndevs/$i" 2>/dev/null
        done
    done
done

# The fabric stack: verbs devices, UCX's build and transports, Open MPI's paths, GPUDirect RDMA's prerequisites,
# and the compute processes the driver rollout refuses to interrupt.
run ibv-devinfo-v ibv_devinfo -v
run ibstat ibstat
run ucx-info-v ucx_info -v
run ucx-info-d ucx_info -d
run ucx-info-b ucx_info -b
run ompi-info-version ompi_info --version
run ompi-info-path ompi_info --path all
run kallsyms-peer-memory grep -E 'ib_register_peer_memory_client|dma_buf_dynamic_attach' /proc/kallsyms
run lsmod-nvidia sh -c 'lsmod | grep -E "^(nvidia|nvidia_peermem|nvidia_uvm|gdrdrv|ib_core|mlx5_core)\b"'
run modinfo-nvidia-license modinfo -F license nvidia
run compute-apps nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader

if python3 -c 'import ansible' 2>/dev/null; then
    cd "$work" || exit 1  # no ansible.cfg from the current directory
    export ANSIBLE_COLLECTIONS_PATH=$repo/collections ANSIBLE_STDOUT_CALLBACK=minimal \
        ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0
    adhoc() {  # adhoc NAME MODULE ARGS
        python3 -m ansible adhoc localhost -c local -m "$2" -a "$3" >"$cap/$1.txt" 2>"$cap/$1.err"
        echo $? >"$cap/$1.rc"
    }
    adhoc module-gpu-topology gpufleet.cluster.gpu_topology "min_driver_branch=535 fail_on_violation=false"
    adhoc module-node-facts gpufleet.cluster.node_facts ""
    adhoc module-rdma-facts gpufleet.cluster.rdma_facts ""
    adhoc module-gpudirect-facts gpufleet.cluster.gpudirect_facts "gpu_count=1 hca_count=1"
else
    echo "ansible-core not importable: modules not run" >"$cap/module-skipped.txt"
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET run ddp-nccl python3 -m torch.distributed.run --standalone --nproc_per_node="$ngpu" \
        "$repo/roles/validate/files/gpufleet_ddp_check.py" --backend nccl --expect-gpus "$ngpu" --size-mb 1024
else
    echo "python3 has no torch with CUDA: DDP check not run" >"$cap/ddp-skipped.txt"
fi

tar -C "$work" -czf "$out/capture.tar.gz" capture
for f in "$cap"/*.rc; do printf '%s=%s ' "$(basename "$f" .rc)" "$(cat "$f")"; done; echo
rm -rf "$work"
