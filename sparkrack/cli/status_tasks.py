"""Looking at the rack, the top-level command `status`: one row per node, then the
deployments."""

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import LIMIT_HELP, task
from sparkrack.core import console

COLLECTION = None


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP, "json": "print JSON for scripts",
            "wide": "every column (hostname, kernel, GPU, memory, the containers' names) and "
                    "each deployment's image, spec and weights; a pipe always gets these"})
@operator_task
def status(c, inventory=None, limit=None, json=False, wide=False):
    """One row per node: reachability, clock, power, clock cap, engine.

    Below the table: what differs between the nodes (hostname, kernel, GPU), then the head's
    deployment records, a failed start by its cause, and the watchdog's last power cycle.
    --wide or a pipe: every column."""
    import time

    from sparkrack.engines import api_url
    from sparkrack.facts.records import NCCL, POWER_CYCLE
    from sparkrack.status.rows import rack_status
    from sparkrack.status.view import (
        NARROW,
        NARROW_WRAPS,
        WIDE,
        deployment_lines,
        differences,
        narrow_cells,
        nccl_line,
        power_cycle_line,
        wide_cells,
    )

    rack = inventory_from(inventory)
    rows, records = rack_status(rack, limit)
    cycle = records.pop(POWER_CYCLE, None)
    nccl = records.pop(NCCL, None)
    current = records.get("current")
    api = api_url(rack, current["engine"]) if current else None
    if json:
        console.print_json({"nodes": [r.as_dict() for r in rows], "deployments": records,
                            "api": api, "power_cycle": cycle, "nccl": nccl})
    else:
        wide = wide or not console.out.is_terminal
        if wide:
            console.print_table("rack status", WIDE, [wide_cells(r) for r in rows], whole=True)
        else:
            console.print_table("rack status", NARROW, [narrow_cells(r) for r in rows],
                                wrap=NARROW_WRAPS)
        # a terminal (narrow): each line wrapped between words, as the table's cells are
        show = print if wide else lambda line: console.out.print(
            line, markup=False, highlight=False, soft_wrap=False)
        cycled = power_cycle_line(cycle, time.time())
        rails = nccl_line(nccl, current, {r.node: r.ports for r in rows if r.ports is not None})
        for line in ([] if wide else differences(rows)) + deployment_lines(records, wide) + (
                [rails] if rails else []) + ([cycled] if cycled else []):
            show(line)
        if api:
            show(f"api: {api} ({current['engine']}"
                 + (", the rack's api_port" if rack.vars.api_port else "") + ")")
    down = [r for r in rows if r.reachable != "ok"]
    for r in down:
        console.say(f"{r.node}: {r.reachable}: {r.error}")
    if down:
        raise_exit(len(down), len(rows))


def raise_exit(down: int, total: int):
    """Exit 1 when some nodes did not answer (the table was still printed)."""
    from invoke.exceptions import Exit

    raise Exit(f"{down} of {total} node(s) did not report", code=1)
