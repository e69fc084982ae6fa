"""Rack tasks: look at the rack (status, facts)."""

from invoke import task

from .. import console
from .common import INVENTORY_HELP, inventory_from, operator_task

LIMIT_HELP = "only these nodes, e.g. spark-01,spark-03"


def _gib(kb: int | None) -> str | None:
    return None if kb is None else f"{kb / 1048576:.1f} GiB"


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP, "json": "print JSON for scripts"})
@operator_task
def status(c, inventory=None, limit=None, json=False):
    """One row per node: reachability, GPU, clocks, power, memory, clock cap, engine."""
    from ..engines import api_url
    from ..status import rack_status

    rack = inventory_from(inventory)
    rows, records = rack_status(rack, limit)
    current = records.get("current")
    api = api_url(rack, current["engine"]) if current else None
    if json:
        console.print_json({"nodes": [r.as_dict() for r in rows], "deployments": records,
                            "api": api})
    else:
        console.print_table(
            "rack status",
            ["rank", "node", "reach", "hostname", "kernel", "gpu", "sm MHz now/max", "power",
             "MemAvailable", "clock cap", "engine"],
            [_status_cells(r) for r in rows])
        for kind in ("current", "last-good", "failed"):
            dep = records.get(kind)
            if dep:
                by = f" by {dep['operator']}" if dep.get("operator") else ""
                state = f" ({dep['status']})" if kind == "current" and dep.get("status") else ""
                error = f": {dep['error']}" if kind == "failed" and dep.get("error") else ""
                weights = (f" weights {dep['model_path']} {dep['weights_digest'][:12]}"
                           if dep.get("weights_digest") else "")
                image = f"{dep['image']} ({dep['image_id'][:19]})" if dep.get("image") \
                    else dep["image_id"][:19]
                print(f"{kind}{state}: {dep['engine']} {dep['profile']} image {image} "
                      f"spec {dep['spec_hash'][:12]}{weights} deployment {dep['deployment_id']}"
                      f"{by}{error}")
        if api:
            print(f"api: {api} ({current['engine']}"
                  + (", the rack's api_port" if rack.vars.api_port else "") + ")")
    down = [r for r in rows if r.reachable != "ok"]
    for r in down:
        console.say(f"{r.node}: {r.reachable}: {r.error}")
    if down:
        raise_exit(len(down), len(rows))


def _status_cells(r) -> list:
    f = r.facts
    if f is None:
        return [r.rank, r.node, r.reachable.upper(), None, None, None, None, None, None, None, None]
    gpu = f.gpu
    clocks = None if gpu.error else f"{gpu.sm_mhz}/{gpu.max_sm_mhz}"
    power = None if gpu.power_w is None else f"{gpu.power_w:.1f} W"
    return [r.rank, r.node, "ok", f.hostname, f.kernel, gpu.name or gpu.error, clocks, power,
            _gib(f.mem_available_kb), r.cap_state, r.engine]


def raise_exit(down: int, total: int):
    """Exit 1 when some nodes did not answer (the table was still printed)."""
    from invoke.exceptions import Exit

    raise Exit(f"{down} of {total} node(s) did not report", code=1)


@task(help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP})
@operator_task
def facts(c, inventory=None, limit=None):
    """Every fact one round trip gathers per node, as JSON."""
    from ..status import gather_status

    rows = gather_status(inventory_from(inventory), limit)
    console.print_json({r.node: (r.facts.as_dict() if r.facts else {"error": r.error}) for r in rows})
