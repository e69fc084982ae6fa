"""The order the rack modules are handed out in: the costliest first.

The rack tier is CPU-bound, so a module's CPU-seconds are about its wall time on a quiet
machine. Handed out longest first (longest-processing-time-first), the last module a rack
process starts is a short one and the two rack processes end together.
docs/internals.md#the-test-suite
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from sparkrack.rehearsal.layout import CGROUP_ROOTS

INTEGRATION = Path(__file__).parent / "integration"
# Each rack module's CPU-seconds, measured module by module in one rack process (the rack's
# nodes and the test process together: their cgroups' cpu.stat) with
# `SPARKRACK_TEST_COSTS=FILE python -m pytest -n 0 tests/integration`, then
# `python tests/rackorder.py FILE` (the first module run also carries the rack's boot). A module not listed counts as DEFAULT_RACK_COST;
# tests/unit/test_rack_order.py wants every one listed.
RACK_MODULE_COST = {
    "test_lifecycle.py": 294, "test_watchdog_rack.py": 340, "test_fleet_rack.py": 200,
    "test_engine_env.py": 185,
    "test_onboard_rack.py": 147, "test_stall_rack.py": 340, "test_upgrade_rack.py": 106,
    "test_switch_rack.py": 90, "test_several_operators.py": 90, "test_rehearsal_shape.py": 74,
    "test_bench_rack.py": 74, "test_twin_rack.py": 63, "test_weights.py": 62,
    "test_pdu_rack.py": 53, "test_provision_rack.py": 52, "test_warm_rack.py": 40,
    "test_breakglass_rack.py": 39, "test_screens_rack.py": 38, "test_restart.py": 36,
    "test_provision_rack_burn.py": 31, "test_rehearsal_rack.py": 23, "test_stub_rack.py": 47,
    "test_provision_rack_images.py": 19, "test_fabric_takeover_rack.py": 18,
    "test_dashboard_rack.py": 17, "test_fabric_renderer_rack.py": 14, "test_status.py": 11,
    "test_twin_capture_rack.py": 11, "test_suite_isolation_rack.py": 7,
    "test_units_rack.py": 5, "test_fleet_docker_rack.py": 1,
    "test_learn_rack.py": 60,  # estimated from its wall time
}
DEFAULT_RACK_COST = 60




def is_rack_module(path: str) -> bool:
    return path.startswith("tests/integration")


def ordered(items: list) -> list:
    """items (pytest's, in collection order) with the rack modules first, the costliest
    first, each module's items together and in their order; then the rest as collected."""
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        first_index.setdefault(item.nodeid.split("::", 1)[0], index)

    def place(item) -> tuple:
        module = item.nodeid.split("::", 1)[0]
        if not is_rack_module(module):
            return 1, 0, first_index[module]
        return 0, -RACK_MODULE_COST.get(Path(module).name, DEFAULT_RACK_COST), first_index[module]

    return sorted(items, key=place)


def slot_cpu_seconds(cgroups: tuple[str, ...]) -> float:
    """The CPU-seconds the given cgroups (a slot's: its nodes', its runner's) have used."""
    unified = next(root for root in CGROUP_ROOTS if (root / "cgroup.controllers").exists())
    return sum(int(re.search(r"usage_usec (\d+)", (unified / name / "cpu.stat").read_text())[1])
               for name in cgroups) / 1e6


def table(lines: list[str]) -> dict[str, int]:
    """{module: CPU-seconds} from the JSON lines conftest writes (one per rack test)."""
    costs: dict[str, float] = defaultdict(float)
    for line in lines:
        row = json.loads(line)
        costs[Path(row["nodeid"].split("::", 1)[0]).name] += row["cpu_s"]
    return {module: round(cost) for module, cost in sorted(costs.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    print("RACK_MODULE_COST = {")
    for module, cost in table(Path(sys.argv[1]).read_text().splitlines()).items():
        print(f"    {module!r}: {max(cost, 1)},")
    print("}")
