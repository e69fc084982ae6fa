"""Node configuration of the simulated GB10: /etc/gpu-sim/node.json over GB10 defaults.

Numbers come from public DGX Spark readings: SM clock 208 MHz idle, ~2,385-2,489 MHz
sustained under load (clocks.max.sm reads 3003, applications clock 2418), ~53-63 W GPU
draw under load, 3-4 W idle in P8; a latched board runs ~715 MHz / ~18 W under load.
Node power is tuned to the field report: 8 nodes uncapped ~1,735 W, capped at 2,200 MHz
1,350-1,425 W. Memory: one 121.7 GiB unified pool (MemTotal 127600748 kB).
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
    "latch_file": "/var/lib/gpu-sim/latched",
    "persistence_mode": True,  # nvidia-persistenced runs on DGX OS
    "mem_total_kb": 127600748,
    "os_used_kb": 9034380,
    "page_cache_kb": 4194304,
    "swap_total_kb": 16777212,
    "idle_sm_mhz": 208,
    "load_sm_mhz": 2470,  # the middle of the loaded clock's wander (the power reference)
    "load_sm_spread_mhz": 100,  # uncapped under load: 2,420-2,520 MHz, never one value
    "lock_wander_mhz": 6,  # under a lock: its bin and up to 6 MHz below (2,184-2,190)
    "max_sm_mhz": 3003,
    "app_sm_mhz": 2418,
    "clock_bin_mhz": 15,
    "latched_sm_mhz": 715,
    "gpu_idle_w": 3.9,
    "gpu_load_w": 58.2,
    "latched_gpu_w": 18.0,
    # a rank wedged in a kernel that spins on a flag its peers never set: the SMs read busy
    # (~96 %) while the GPU draws ~20 W, a fraction of the load span (vllm#42354's pattern)
    "spin_power_share": 0.3,
    "node_idle_w": 45.0,
    "node_load_w": 217.0,
    "power_clock_exponent": 2.6,
    "ambient_c": 34.0,
    "temp_c_per_w": 0.9,
}


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
    seed = uuid.uuid5(uuid.NAMESPACE_DNS, f"{config['node']}.gpu-sim")
    config["uuid"] = config["uuid"] or f"GPU-{seed}"
    config["serial"] = config["serial"] or str(1650000000000 + seed.int % 10**9)
    config["meminfo_file"] = config["meminfo_file"] or os.path.join(config["state_dir"], "meminfo")
    return config
