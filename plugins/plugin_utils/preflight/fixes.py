# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to do about each failing preflight check, keyed ``check`` or ``check.kind`` (one text per failure kind).

Each text is about its own check only: a dependent check whose prerequisite failed is skipped, not given a fix.
``%(name)s`` placeholders are filled by the check (floors from the recipe, the accelerator the plan runs).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

FIX = {
    "probe": "Make the node reachable over SSH with Python >= 3.9 and re-run; the probe task's error above says why "
             "it failed.",
    "probe.options": "node_probe refused an option set for this node (the role's argument-spec check runs once, for the "
                     "first host): correct preflight_command_timeout, preflight_probe_root or preflight_access_paths "
                     "in the node's host_vars / group_vars (the observed text names the option) and re-run.",
    "vendor.none": "No %(vendor)s GPU stack was found on the node (no driver module, no vendor tool): install the "
                   "%(vendor)s driver, or remove the node from this inventory.",
    "vendor.other": "The node carries %(found)s GPUs but the plan runs %(vendor)s: move the node to an inventory for "
                    "its accelerator (kimi_k3_accelerator), or replace it.",
    "gpu_tools.not_found": "Install nvidia-smi: it ships with the NVIDIA driver's user-space package "
                           "(nvidia-utils-<branch> / the .run installer); reinstall the driver if it is missing.",
    "gpu_tools.driver_not_loaded": "The NVIDIA kernel module is not loaded: `modprobe nvidia` (see `dmesg | grep -i "
                                   "nvidia` for why: an unsigned module under Secure Boot, a kernel update without "
                                   "the DKMS rebuild); reboot if the driver was just installed. GPU, fabric and "
                                   "IMEX checks run again once nvidia-smi works.",
    "gpu_tools.driver_library_mismatch": "The kernel module and the user-space driver are different versions (the "
                                         "driver was upgraded without a reboot): reboot the node.",
    "gpu_tools.failing": "nvidia-smi fails on the node: run `nvidia-smi` there and fix what it reports (Xid errors in "
                         "dmesg, a GPU fallen off the bus: reseat or RMA).",
    "gpu_tools.amd": "Install ROCm's amd-smi (amd-smi-lib, or rocm-smi) and load amdgpu (`modprobe amdgpu`; see "
                     "`dmesg | grep -i amdgpu`).",
    "gpu_driver": "Install NVIDIA driver r%(min)s or newer (open kernel module) and reboot: the K3 image is a cu130 "
                  "build.",
    "gpu_driver.mismatch": "The loaded kernel module is older than the installed driver: reboot the node.",
    "cuda_version": "The driver serves an older CUDA than %(min)s: install a driver branch that serves it.",
    "cuda_version.missing": "libcuda (the driver's user-mode part) is missing or broken: reinstall the driver's "
                            "user-space package.",
    "rocm_version": "Upgrade ROCm (amdgpu DKMS + user space) to %(min)s or newer; keep all nodes on one release.",
    "gpu_model": "The node carries %(model)s GPUs, the plan runs %(acc)s: move the node to an inventory whose "
                 "kimi_k3_accelerator is %(model)s, or replace it.",
    "gpu_model.unknown": "The GPUs were not identified (names above): check `nvidia-smi -L` / `amd-smi list`; an "
                         "unsupported SKU cannot run this recipe.",
    "gpu_count": "A GPU is missing: check `nvidia-smi -L` / `amd-smi list` and dmesg (Xid / fallen off the bus), "
                 "reseat or RMA; or lower kimi_k3_gpus_per_node.",
    "gpu_count.more": "Only kimi_k3_gpus_per_node GPUs are used; raise it to use the others.",
    "gpu_busy": "Something else holds GPU memory: find it (`nvidia-smi --query-compute-apps=pid,used_memory "
                "--format=csv`, `amd-smi process`) and stop it, or stop the old vLLM container (teardown).",
    "gpu_memory": "GPU reports less memory than the model needs (wrong SKU, MIG/partition mode, or ECC retired "
                  "pages); disable MIG / use SPX-NPS1 or replace the node.",
    "fabric": "NVLink fabric registration incomplete: check the NVLink switch trays (NMX-Controller / Global FM), "
              "wait for 'In Progress' to finish, then `nvidia-smi -q | grep -A10 Fabric`.",
    "nvlink_domain": "All nodes of one deployment must be in one NVL72 NVLink domain (same ClusterUUID and "
                     "CliqueId): pick trays from the same rack/partition.",
    "imex.missing": "Install the NVIDIA IMEX package (nvidia-imex-<branch>) and start nvidia-imex on every tray.",
    "imex": "Start nvidia-imex on every tray (`systemctl restart nvidia-imex`), list every tray's IP in "
            "/etc/nvidia-imex/nodes_config.cfg, open TCP 50000 between trays; `nvidia-imex-ctl -N` must say "
            "Domain State: UP.",
    "imex_nodes": "Add every deployment node's internal address to /etc/nvidia-imex/nodes_config.cfg on every tray "
                  "and restart nvidia-imex.",
    "imex_channel": "Create the IMEX channel: `mknod /dev/nvidia-caps-imex-channels/channel0 c <major> 0` "
                    "(major from /proc/devices, nvidia-caps-imex-channels); it does not survive a reboot.",
    "rdma": "Bring the RDMA ports up (cable/switch/subnet manager; `ibv_devinfo`, `rdma link`), or set "
            "preflight_rdma_allow_down_ports if a rail is intentionally unused.",
    "rdma_devices": "Load the RDMA verbs driver so /dev/infiniband/uverbs* exist (`modprobe ib_uverbs`, persist it in "
                    "/etc/modules-load.d/; rdma-core), then check `ls /dev/infiniband`: the plan mounts /dev/infiniband "
                    "into the container and Docker refuses to start it without the device.",
    "rdma.none": "No RDMA device found: install rdma-core (ibverbs-utils) and the NIC driver (mlx5_ib / ionic_rdma), "
                 "then check `ibv_devinfo`.",
    "gpudirect": "Enable GPUDirect RDMA: load nvidia_peermem (`modprobe nvidia_peermem`) or use DMA-BUF "
                 "(open kernel module, recent rdma-core).",
    "gpudirect.peermem": "The plan sets NCCL_DMABUF_ENABLE=0, so NCCL registers GPU memory through nvidia_peermem only: "
                         "`modprobe nvidia_peermem` and persist it (`echo nvidia_peermem > "
                         "/etc/modules-load.d/nvidia-peermem.conf`); or drop NCCL_DMABUF_ENABLE=0 from "
                         "kimi_k3_extra_env where DMA-BUF works.",
    "gpudirect.required": "%(backend)s moves expert traffic GPU-to-NIC directly (GPUDirect RDMA): load nvidia_peermem "
                          "(`modprobe nvidia_peermem`, persist it in /etc/modules-load.d/) or use the open kernel "
                          "module with a DMA-BUF capable rdma-core.",
    "ibgda_driver": "%(backend)s needs IBGDA (GPU-initiated RDMA) from the NVIDIA driver: add `%(options)s` to "
                    "/etc/modprobe.d/nvidia.conf, rebuild the initramfs (`update-initramfs -u` / `dracut -f`) and "
                    "REBOOT the node (the parameters are read when the module loads); then "
                    "`grep -E 'EnableStreamMemOPs|RegistryDwords' /proc/driver/nvidia/params`.",
    "ibgda_driver.unreadable": "/proc/driver/nvidia/params is not readable although nvidia-smi works: check that the "
                               "probe reads the node's own /proc (preflight_probe_root) and that the nvidia module is "
                               "loaded (`lsmod | grep -w nvidia`).",
    "mori_rdma": "%(backend)s (MoRI) drives the NIC from the GPU (IBGDA) through an RDMA provider it supports: load "
                 "the NIC's RDMA driver (`modprobe mlx5_ib` for ConnectX, `modprobe ionic_rdma` for Pensando/Pollara "
                 "with AMD's ionic driver package, `modprobe bnxt_re` for Thor2) and persist it in "
                 "/etc/modules-load.d/; `ibv_devinfo` must list the device. A NIC MoRI does not support cannot run "
                 "this kernel: use a supported NIC or another --all2all-backend (kimi_k3_all2all_backend).",
    "mori_rdma.gpu": "amdgpu is not loaded: `modprobe amdgpu` (ROCm's amdgpu-dkms for peer-to-peer RDMA); see "
                     "`dmesg | grep -i amdgpu`.",
    "kernel_state.unreadable": "/proc/modules is not readable on the node: check preflight_probe_root (real nodes: "
                               "leave it at /) and that the probe runs on the node itself.",
    "engine": "Start the container engine and make kimi_k3_docker_host point to its socket.",
    "engine_gpu.nvidia": "Make the engine GPU-capable: NVIDIA Container Toolkit (`nvidia-ctk runtime configure "
                         "--runtime=docker`, restart dockerd) or a CDI spec (`nvidia-ctk cdi generate`).",
    "engine_gpu.amd": "The engine needs /dev/kfd and /dev/dri/renderD* on the node: load amdgpu and check the "
                      "device nodes' permissions (group video/render).",
    "shm": "Enlarge /dev/shm (mount -o remount,size=...) or lower kimi_k3_shm_size / preflight_min_shm.",
    "memlock": "Raise the memlock limit to unlimited (limits.d `* - memlock unlimited`, systemd "
               "LimitMEMLOCK=infinity for dockerd) or adjust kimi_k3_memlock.",
    "disk": "Free space on the model cache filesystem (or point kimi_k3_model_cache_dir elsewhere), or "
            "pre-download the weights there.",
    "weight_read": "Set kimi_k3_weight_read_mib_s: %(mib_s)d for %(host)s (its host_vars) and re-run the plan: a "
                   "deployment's launch timeouts follow its slowest node; or put the weights on faster storage "
                   "(kimi_k3_model_cache_dir) and measure again.",
    "ports.in_use": "Stop whatever listens on the port (`ss -ltnp`) or change kimi_k3_api_port / kimi_k3_master_port "
                    "/ kimi_k3_dp_rpc_port.",
    "ports.not_local": "The address is not configured on this node: fix kimi_k3_internal_address / kimi_k3_api_host "
                       "(or configure the address).",
    "python_requests": "Install the requests library for the node's Python %(python)s - `apt-get install "
                       "python3-requests` (Debian/Ubuntu), `dnf install python3-requests` (RHEL), or `%(python)s -m pip "
                       "install requests`; or point ansible_python_interpreter at a Python that has it. The "
                       "community.docker modules the image, launch and teardown roles run on the node import it.",
    "socket_ifname.missing": "kimi_k3_socket_ifname (%(names)s) names an interface this node does not have: set it to "
                             "the cluster-internal interface, named the same on every node (`ip -br addr`), or "
                             "rename the interface (udev / netplan).",
    "socket_ifname.down": "Bring the interface up (`ip link set dev %(name)s up`; check the cable, the switch port "
                          "and the bond's members): NCCL/Gloo would hang at start-up.",
    "socket_ifname.address": "The node's kimi_k3_internal_address %(address)s is on none of %(names)s: NCCL/Gloo "
                             "would talk on one network and vLLM rendezvous on another. Point kimi_k3_socket_ifname "
                             "at the interface holding that address, or fix kimi_k3_internal_address.",
    "socket_mtu": "Set one MTU on the NCCL/Gloo interface of every node (`ip link set dev <if> mtu <n>`, persist it "
                  "in netplan/ifcfg, and match the switch ports): mismatched MTUs drop large frames and stall "
                  "collectives.",
    "port_exposure": "The inter-node ports (%(variables)s: %(ports)s; also NCCL/Gloo bootstrap and the ports vLLM "
                     "picks for torch.distributed) take unauthenticated connections and vLLM binds them on every "
                     "address: on %(host)s allow them only from the cluster network %(network)s and drop them on "
                     "%(outside)s (nftables/iptables: accept tcp from %(network)s to those ports, drop the rest; or a "
                     "security group), or keep the nodes on an isolated network without other routable addresses.",
    "time_sync": "Enable NTP (chronyd or systemd-timesyncd) and wait for synchronisation.",
    "probe_errors": "Look at the listed probe errors; install the missing tools where they matter.",
    "drift": "Bring all nodes to the same version (drivers, ROCm, kernel, engine) before deploying.",
}
