"""The scratch inventory steps 2-5 run against: the rack's with the new node already in
it (as the member it will be, or appended as a spare), a scratch known_hosts, and a fleet
over it. The inventory's own files are never written here."""

from __future__ import annotations

import dataclasses

from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, Node, load_inventory
from sparkrack.onboard import join
from sparkrack.onboard.context import Context


def build(ctx: Context) -> None:
    """Set ctx.work, ctx.new, ctx.members and a fresh ctx.fleet (for the fabric addresses
    ctx holds)."""
    ctx.close()
    report, inventory = ctx.report, ctx.inventory
    plan = join.plan_join(inventory, report.name, report.address, ctx.roce_addr,
                          roce_twin_addr=ctx.roce_twin_addr,
                          replace=report.replace, stamp="scratch")
    copy = ctx.scratch / f"inventory-{len(list(ctx.scratch.glob('inventory-*')))}"
    join.materialize_light(inventory.path, copy, plan)
    edited = load_inventory(copy)
    original = {n.name: n for n in inventory.nodes}

    def back(node: Node) -> Node:  # key files as the real inventory resolves them
        key = node.key_file
        if key is not None and copy in key.parents:
            key = inventory.path / key.relative_to(copy)
        return dataclasses.replace(node, key_file=key)

    if report.replace is not None:
        ctx.new = back(edited.node(report.name))
        nodes = tuple(original.get(n.name, back(n)) if n.name != report.name else ctx.new
                      for n in edited.nodes)
    else:
        ctx.new = back(next(n for n in edited.spares if n.name == report.name))
        nodes = (*[original.get(n.name, back(n)) for n in edited.nodes], ctx.new)
    ctx.members = tuple(n for n in nodes if n.name != report.name)
    rack_vars = dataclasses.replace(edited.vars, known_hosts_file=str(ctx.known_hosts))
    ctx.work = Inventory(path=copy, nodes=nodes, vars=rack_vars, groups=edited.groups)
    ctx.fleet = Fleet(ctx.work, nodes)
