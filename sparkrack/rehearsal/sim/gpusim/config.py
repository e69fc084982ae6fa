"""Node configuration of the simulated GB10: /etc/gpu-sim/node.json over GB10 defaults.

Numbers come from public DGX Spark readings: SM clock 208 MHz idle, 2,424-2,483 MHz at
84-89 W under cuBLAS load (clocks.max.sm reads 3003, applications clock 2418), 3-4 W idle
in P8; a latched board runs 481-858 MHz at 5.8-15.8 W under load. Node (wall) power idles
at 25-37 W and is tuned to the field report under load: 8 nodes uncapped ~1,735 W, capped
at 2,200 MHz 1,350-1,425 W. Memory: one unified pool of about 121.7 GiB.
"""

import os

DEFAULT_CONFIG_PATH = "/etc/gpu-sim/node.json"
DEFAULT_PORT = 47800

GB10_DEFAULTS = {
    "node": None,  # hostname when unset
    "gpu_index": 0,
    "name": "NVIDIA GB10",
    "uuid": None,  # derived from the node name when unset
    "serial": None,  # derived from the node name when unset
    "pci_bus_id": "0000000F:01:00.0",
    "driver_version": "580.126.09",
    "cuda_version": "13.0",
    "compute_cap": "12.1",
    "port": DEFAULT_PORT,
    "state_dir": "/run/gpu-sim",
    "meminfo_file": None,  # STATE_DIR/meminfo when unset
    "cmdline_file": None,  # STATE_DIR/cmdline when unset (bound over /proc/cmdline)
    "kernel_file": "/etc/gpu-sim/kernel.json",  # the kernel the node boots (gpusim.kernel)
    "latch_file": "/var/lib/gpu-sim/latched",
    "persistence_mode": True,  # nvidia-persistenced runs on DGX OS
    "mem_total_kb": 127600748,  # each unit its own within UNIT_MEM_TOTAL_KB (unit_figures)
    "os_used_kb": 9034380,
    "page_cache_kb": 4194304,
    "swap_total_kb": 16777212,
    "idle_sm_mhz": 208,
    "load_sm_mhz": 2454,  # the middle of the loaded clock's wander (the power reference)
    "load_sm_spread_mhz": 58,  # uncapped under load: 2,425-2,483 MHz, never one value
    "lock_wander_mhz": 6,  # under a lock: its bin and up to 6 MHz below (2,184-2,190)
    "max_sm_mhz": 3003,
    "app_sm_mhz": 2418,
    "clock_bin_mhz": 15,
    "latched_sm_mhz": 670,  # latched under load: 482-858 MHz, wandering
    "latched_sm_spread_mhz": 376,
    "gpu_idle_w": 3.9,
    "gpu_load_w": 86.5,  # at load_sm_mhz: 84.3-88.8 W over the loaded clock's wander
    "latched_gpu_w": 10.8,  # at latched_sm_mhz; 5.8-15.8 W over the latched wander
    "latched_gpu_spread_w": 10.0,
    # A kernel polling a flag (a rank waiting in a collective, a wedged one) reads busy at a
    # spin's draw: 96 % at 16-27 W on a GB10 (vllm#42354, spark-vllm-docker#260), 100 % at
    # 124 W on an H100 (idle 72 W, matmuls 468 W): a fifth of the load span at the boost
    # clock (22.1 W uncapped; 17.9 W under the 2,190 MHz lock, the draw following the clock)
    "spin_power_share": 0.22,
    # Healthy decode on a GB10 averages ~45 W, swinging up to ~90 W (spark-vllm-docker#260):
    # each reading a share of the load span drawn from a triangle (low, mode, high) whose
    # mean is half of it: 24.5-86.5 W uncapped, 45.2 W on average; utilization 90-99 %
    "decode_share": [0.25, 0.25, 1.0],
    "decode_util": [90, 99],
    "node_idle_w": 31.0,  # at the wall; each unit its own within 25-37 W (unit_figures)
    # A host wedged by unified-memory exhaustion (open-gpu-kernel-modules#1358): no public
    # reading of its draw. Reasoned: memory full, the GPU's clock held where the work left
    # it and no work done, the CPU's cores spinning in the kernel's reclaim: about what a
    # rank spinning in a collective adds over idle (the spin's share of the load span), so
    # 72 W on a 31 W unit (67-77 W over the units): powered, never near an off outlet's 0 W
    "wedged_power_share": 0.22,
    "node_load_w": 217.0,
    "power_clock_exponent": 2.3,
    "ambient_c": 34.0,
    "temp_c_per_w": 0.55,
    # GB10 on driver 580 (a public `nvidia-smi -q -d TEMPERATURE`): T.Limit margin 57 C at
    # 38 C, the hardware slowdown 2 C past the T.Limit, the shutdown 5 C past it
    "tlimit_c": 95,
    "slowdown_tlimit_c": -2,
    "shutdown_tlimit_c": -5,
    "heat_file": "/var/lib/gpu-sim/heat",  # degrees C the rack adds to the air (rehearsal.heat)
    # watts the board's firmware holds the GPU to (rehearsal.power-limit): the clock drops
    # until the draw fits; nvidia-smi's power.limit stays N/A and no clock event reason
    # says it, as owners report ("nvidia-smi shows nothing unusual": docs/field-notes.md)
    "power_limit_file": "/var/lib/gpu-sim/power-limit",
    "roce_port": 4791,  # RoCE v2's UDP port: the node's HCAs answer RDMA writes on it (hca.py)
    # present: the node's NCCL hangs its next collective, its kernel spinning (rehearsal.
    # nccl-hang; STATE_DIR/collective-hang when unset: gone at reboot)
    "collective_hang_file": None,
}

# What differs between units of one release (public readings): MemTotal 127,600,524 to
# 127,622,144 kB, wall idle 25 to 37 W. A node's own figures are drawn from its name.
UNIT_MEM_TOTAL_KB = (127600524, 127622144)
UNIT_IDLE_W = (25.0, 37.0)


def unit_figures(node: str) -> dict:
    """This unit's MemTotal and wall idle power: the same for a node name every time,
    within the spread real units show."""
    import hashlib  # here, not at the top: nvidia-smi's client needs only config_path

    seed = int.from_bytes(hashlib.sha256(f"{node}.gpu-sim.unit".encode()).digest()[:8], "big")
    low, high = UNIT_MEM_TOTAL_KB
    idle_low, idle_high = UNIT_IDLE_W
    return {"mem_total_kb": low + seed % (high - low + 1),
            "node_idle_w": idle_low + (seed >> 32) % round(10 * (idle_high - idle_low) + 1) / 10}


def config_path() -> str:
    """The config file in force: $GPU_SIM_CONFIG, else /etc/gpu-sim/node.json."""
    return os.environ.get("GPU_SIM_CONFIG", DEFAULT_CONFIG_PATH)


def load_config(path: str | None = None) -> dict:
    """Read the node config (missing file = all defaults); unknown keys are an error."""
    import json  # here, not at the top: nvidia-smi's client needs only config_path
    import socket
    import uuid

    path = path or config_path()
    given = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            given = json.load(fh)
    unknown = sorted(set(given) - set(GB10_DEFAULTS))
    if unknown:
        raise ValueError(f"{path}: unknown keys {', '.join(unknown)}")
    config = {**GB10_DEFAULTS, **given}
    config["node"] = config["node"] or socket.gethostname()
    config.update({key: value for key, value in unit_figures(config["node"]).items()
                   if key not in given})
    seed = uuid.uuid5(uuid.NAMESPACE_DNS, f"{config['node']}.gpu-sim")
    config["uuid"] = config["uuid"] or f"GPU-{seed}"
    config["serial"] = config["serial"] or str(1650000000000 + seed.int % 10**9)
    config["meminfo_file"] = config["meminfo_file"] or os.path.join(config["state_dir"], "meminfo")
    config["cmdline_file"] = config["cmdline_file"] or os.path.join(config["state_dir"], "cmdline")
    config["collective_hang_file"] = config["collective_hang_file"] or os.path.join(
        config["state_dir"], "collective-hang")
    return config
