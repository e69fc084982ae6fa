"""A jumbo frame and a short burst on every cabled rail.

The `fabric` collection: `invoke fabric.check` (sparkrack/rails/)."""

from __future__ import annotations

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = "fabric"


@task(help={"inventory": INVENTORY_HELP, "seconds": "length of each burst (default 1)",
            "json": "print JSON for scripts"})
@operator_task
def check(c, inventory=None, seconds=1.0, json=False):
    """Test every cabled RoCE rail: a full-size frame, then a short burst.

    Each node to its neighbour on every cabled RoCE function: a full-size frame
    (fabric_mtu), then a short burst; names a rail that drops full-size frames, negotiated
    less than fabric_link_gbit, carries under a tenth of its rate or runs far below the
    rack's median. Exits 1 when one does."""
    from sparkrack.rails import check_fabric

    report = check_fabric(inventory_from(inventory), seconds=float(seconds))
    if json:
        console.print_json(report.as_dict())
    else:
        gbit = "Gbit/s" if report.scale == 1 else f"Gbit/s (measured x {report.scale:g})"
        console.print_table("fabric", ["from", "to", "rail", "negotiated",
                                       f"{report.mtu}-byte frame", gbit],
                            [[m.pair.src.node, m.pair.dst.node,
                              f"{m.pair.src.netdev} ({m.pair.src.hca})",
                              m.pair.src.rate or "?", m.error or m.jumbo,
                              f"{report.link_gbit_s(m):.2f}"] for m in report.measured])
        for problem in report.problems:
            print(f"PROBLEM: {problem}")
        print("fabric: every rail passes" if report.ok else
              f"fabric: {len(report.problems)} problem(s)")
    if not report.ok:
        from invoke.exceptions import Exit

        raise Exit(code=1)
