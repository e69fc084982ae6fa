"""Step 6, join: the new node written into hosts.yml by a line-based edit that keeps every
other line as it was; the replaced node's host_vars moved aside (docs/onboarding.md).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from sparkrack.core.atomic import copy_atomically, remove, write_atomically
from sparkrack.core.errors import InventoryError, SparkrackError, UsageError
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory, load_inventory
from sparkrack.inventory.watchdog_record import read_record
from sparkrack.onboard import headmove, outlets, trust
from sparkrack.onboard.context import Context, Step
from sparkrack.onboard.outcomes import JoinPlan

_ORDER = ("ansible_host", "rank", "roce_addr", "roce_twin_addr", "spare")


@dataclass(frozen=True)
class Entry:
    """Where one host's entry sits in hosts.yml (0-based lines, end exclusive)."""

    name: str
    group: str
    start: int
    end: int
    indent: int
    flow: bool  # `name: {k: v}` on one line
    keys: tuple[str, ...]
    child_indent: int = 0  # a block entry's key column


def host_entries(text: str) -> dict[str, Entry]:
    """Every host entry of hosts.yml text: all.children.<group>.hosts.<name>."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    lines = text.splitlines()
    entries: dict[str, Entry] = {}
    everything = _child(root, "all")
    children = _child(everything, "children")
    if not isinstance(children, yaml.MappingNode):
        return entries
    for group_key, group in children.value:
        hosts = _child(group, "hosts")
        if not isinstance(hosts, yaml.MappingNode):
            continue
        for key, value in hosts.value:
            start = key.start_mark.line
            end = max(_end(value), start + 1)
            while end - 1 > start and _blank_or_comment(lines[end - 1]):
                end -= 1  # comments after a block entry belong to what follows
            keys = tuple(k.value for k, _ in value.value) if isinstance(
                value, yaml.MappingNode) else ()
            flow = isinstance(value, yaml.MappingNode) and value.flow_style
            child = (value.value[0][0].start_mark.column if isinstance(value, yaml.MappingNode)
                     and value.value else key.start_mark.column + 2)
            entries[key.value] = Entry(key.value, group_key.value, start, end,
                                       key.start_mark.column, bool(flow) or end == start + 1,
                                       keys, child)
    return entries


def _end(node) -> int:
    """The line after the last line of node (0-based, exclusive); a block collection's own
    end mark points at the next token, so its children's ends are used."""
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style:
        items = node.value if isinstance(node, yaml.SequenceNode) else [
            n for pair in node.value for n in pair]
        return max((_end(item) for item in items), default=node.start_mark.line + 1)
    return node.end_mark.line + (1 if node.end_mark.column > 0 else 0)


def _child(node, name: str):
    if not isinstance(node, yaml.MappingNode):
        return None
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == name:
            return value
    return None


def _blank_or_comment(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _scalar(value: object) -> str:
    """A value as YAML flow text that reads back as exactly that value: plain when it is a
    simple word YAML takes as that same string (or number), else double-quoted with every
    special character escaped (JSON's string syntax is YAML's double-quoted style)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and yaml.safe_load(text) == text:
        return text
    quoted = json.dumps(text, ensure_ascii=True)
    if yaml.safe_load(quoted) != text:  # never write what would not read back
        raise UsageError(f"cannot write {text!r} into hosts.yml safely")
    return quoted


def render_entry(name: str, values: Mapping[str, object], like: Entry | None,
                 indent: int) -> list[str]:
    """The lines of a host entry, in the style (and key order) of its neighbour like."""
    order = [k for k in (like.keys if like else ()) if k in values]
    order += [k for k in _ORDER if k in values and k not in order]
    order += [k for k in values if k not in order]
    pad = " " * indent
    if like is None or like.flow:
        body = ", ".join(f"{k}: {_scalar(values[k])}" for k in order)
        return [f"{pad}{_scalar(name)}: {{{body}}}"]
    inner = " " * (indent + max(2, like.child_indent - like.indent))
    return [f"{pad}{_scalar(name)}:"] + [f"{inner}{k}: {_scalar(values[k])}" for k in order]


def edit_hosts(text: str, name: str, values: Mapping[str, object], *,
               replace: str | None = None, group: str | None = None) -> str:
    """hosts.yml text with name's entry set to values: in place of replace's entry (which is
    removed), else in place of name's own entry, else appended to group (default: the
    group of the first host). A previous entry of name elsewhere is removed."""
    lines = text.splitlines()
    entries = host_entries(text)
    if not entries:
        raise UsageError("hosts.yml lists no host to place the new one next to")
    if replace is not None and replace not in entries:
        raise UsageError(f"{replace} is not in hosts.yml")
    first = min(entries.values(), key=lambda e: e.start)
    anchor = entries.get(replace) if replace else entries.get(name)
    if anchor is None:
        group = group or first.group
        siblings = [e for e in entries.values() if e.group == group]
        if not siblings:
            raise UsageError(f"no group {group} in hosts.yml")
        like = max(siblings, key=lambda e: e.start)
        new_lines = render_entry(name, values, like, like.indent)
        edits = [(like.end, like.end, new_lines)]
    else:
        like = _neighbour(entries, anchor)
        new_lines = render_entry(name, values, like, anchor.indent)
        edits = [(anchor.start, anchor.end, new_lines)]
    own = entries.get(name)
    if own is not None and own is not anchor:
        edits.append((own.start, own.end, []))
    for start, end, replacement in sorted(edits, key=lambda e: -e[0]):
        lines[start:end] = replacement
    return "\n".join(lines) + ("\n" if text.endswith("\n") or not text else "")


def _neighbour(entries: Mapping[str, Entry], anchor: Entry) -> Entry:
    """An entry of the same group other than anchor (for style), else anchor itself."""
    others = [e for e in entries.values() if e.group == anchor.group and e is not anchor]
    return min(others, key=lambda e: abs(e.start - anchor.start)) if others else anchor


def plan_join(inventory: Inventory, name: str, address: str, roce_addr: str | None, *,
              roce_twin_addr: str | None = None, replace: str | None = None,
              stamp: str | None = None) -> JoinPlan:
    """The hosts.yml edit (and host_vars move) that puts name into the inventory."""
    hosts_file = inventory.path / "hosts.yml"
    before = hosts_file.read_text(encoding="utf-8")
    values: dict[str, object] = {"ansible_host": address}
    rank = None
    if replace is not None:
        rank = inventory.node(replace).rank
        values["rank"] = rank
    else:
        values["spare"] = True
    if roce_addr and roce_addr != address:
        values["roce_addr"] = roce_addr
    if roce_twin_addr:
        values["roce_twin_addr"] = roce_twin_addr
    after = edit_hosts(before, name, values, replace=replace)
    moved, edited = {}, {}
    if replace is not None and replace != name:
        old_vars = inventory.path / "host_vars" / f"{replace}.yml"
        if old_vars.is_file():
            when = stamp or time.strftime("%Y%m%d-%H%M%S")
            moved[f"host_vars/{replace}.yml"] = f"host_vars/.{replace}.yml.replaced-by-{name}-{when}"
        pdu_file = outlets.section_file(inventory.path)
        if pdu_file is not None:
            text = pdu_file.read_text(encoding="utf-8")
            followed = outlets.follow(text, replace, name)
            if followed != text:
                edited[str(pdu_file.relative_to(inventory.path))] = (text, followed)
    return JoinPlan(before, after, moved, rank, edited)


def check_plan(inventory: Inventory, plan: JoinPlan, name: str) -> Inventory:
    """Load the inventory as the plan would leave it (in a temporary copy); InventoryError
    or UsageError if it would not load or not hold name where planned."""
    with tempfile.TemporaryDirectory(prefix="sparkrack-join-") as scratch:
        copy = materialize_light(inventory.path, Path(scratch) / "inventory", plan)
        try:
            edited = load_inventory(copy)
        except InventoryError as error:
            raise UsageError(f"the edited hosts.yml would not load: {error.line()}",
                             fix="nothing was written; fix hosts.yml by hand or report this") from None
    placed = ([n for n in edited.nodes if n.name == name and n.rank == plan.rank]
              if plan.rank is not None else [n for n in edited.spares if n.name == name])
    if not placed:
        raise UsageError(f"the edited hosts.yml does not hold {name} as planned",
                         fix="nothing was written; report this")
    return edited


COPIED = ("group_vars", "host_vars", "engines", "models")  # what the loaders read


def materialize_light(source: Path, target: Path, plan: JoinPlan) -> Path:
    """A copy at target of what the inventory loaders read (hosts.yml, group_vars,
    host_vars, engines, models; never key files), with the plan applied."""
    target.mkdir(parents=True)
    for name in COPIED:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, symlinks=True)
    (target / "hosts.yml").write_text(plan.hosts_after, encoding="utf-8")
    for name, (_, after) in plan.edited_vars.items():
        (target / name).write_text(after, encoding="utf-8")
    for old, new in plan.moved_host_vars.items():
        (target / old).rename(target / new)
    return target


def apply_join(inventory: Inventory, plan: JoinPlan) -> None:
    """Write the plan, each step durable, in an order that no interruption can turn into a
    silently wrong inventory: 1. a backup copy of each host_vars file that leaves (hidden:
    the loader skips it; the inventory is still the old, correct one), 2. hosts.yml
    replaced atomically (its mode kept), then the outlet map, 3. the leaving host_vars
    files removed. Cut between 2 and 3, the loader refuses the leftover file and names its
    backup; cut within 2, it names the outlet map's node that hosts.yml no longer holds."""
    hosts_file = inventory.path / "hosts.yml"
    if hosts_file.read_text(encoding="utf-8") != plan.hosts_before:
        raise UsageError(f"{hosts_file} changed while onboarding ran",
                         fix="nothing was written; run onboard again")
    for name, (before, _) in plan.edited_vars.items():
        if (inventory.path / name).read_text(encoding="utf-8") != before:
            raise UsageError(f"{inventory.path / name} changed while onboarding ran",
                             fix="nothing was written; run onboard again")
    for old, backup in plan.moved_host_vars.items():
        copy_atomically(inventory.path / old, inventory.path / backup)
    write_atomically(hosts_file, plan.hosts_after)
    for name, (_, after) in plan.edited_vars.items():
        write_atomically(inventory.path / name, after)
    for old in plan.moved_host_vars:
        remove(inventory.path / old)


# --- The step -----------------------------------------------------------------------------


def run(ctx: Context) -> None:
    """Step 6: the new node into hosts.yml (docs/onboarding.md)."""
    report, inventory = ctx.report, ctx.inventory
    hosts = inventory.path / "hosts.yml"
    with ctx.step("join") as step:
        plan = plan_join(inventory, report.name, report.address, ctx.roce_addr,
                         roce_twin_addr=ctx.roce_twin_addr, replace=report.replace)
        check_plan(inventory, plan, report.name)
        report.join, report.rank = plan, plan.rank
        for line in plan.diff().splitlines():
            if line.startswith(("+++ ", "--- ")):
                edited = line[4:].removesuffix(" (after onboarding)")
            elif line.startswith(("+", "-")):
                ctx.line(step, f"{edited} {line}")
        for old_path, new_path in plan.moved_host_vars.items():
            ctx.line(step, f"{old_path} -> {new_path} (the old hardware's overrides)")
        where = (f"rank {plan.rank} in place of {report.replace}" if plan.rank is not None
                 else "a spare (outside the TP group)")
        unchanged = plan.unchanged
        head_moves = headmove.replaces_head(ctx) and not unchanged
        if report.check:
            if head_moves:
                ctx.line(step, f"would move the head's audit log and records to {report.name}")
            ctx.set(step, "ok" if unchanged else "would",
                    f"{report.name} already in {hosts} as {where}"
                    if unchanged else f"would write {report.name} into {hosts} as {where}")
            report.message = next_steps(ctx, plan)
            return
        if unchanged:
            report.joined = True
            report.message = next_steps(ctx, plan)
            ctx.set(step, "ok", f"{report.name} already in {hosts} as {where}")
            return
        source = headmove.gather(ctx) if head_moves else None
        apply_join(inventory, plan)
        report.joined = True
        forget_old_key(ctx, step)
        warning = old_still_running(ctx)
        if warning:
            ctx.line(step, warning)
        report.message = next_steps(ctx, plan)
        done = f"{report.name} written into {hosts} as {where}"
        if source is not None:
            try:
                for line in headmove.move(ctx, source):
                    ctx.line(step, line)
            except SparkrackError as error:
                ctx.stop(step, "failed", f"{done}; the head's state did not move: "
                         f"{error.line()}")
        ctx.set(step, "changed", done)


def forget_old_key(ctx: Context, step: Step) -> None:
    """Remove the replaced node's host key from known_hosts when it lived elsewhere."""
    old, new = ctx.old, ctx.new
    if old is None or old.address == new.address:
        return
    real = ctx.inventory.known_hosts_path
    if not real.is_file():
        return
    text = real.read_text()
    ids = [trust.host_id(old.address, old.port)]
    if old.name != new.name:
        ids.append(old.name)
    kept = trust.without_ids(text, ids)
    if kept != text:
        write_atomically(real, kept)
        ctx.line(step, f"{real}: removed the key of {old.name} ({old.address})")


def old_still_running(ctx: Context) -> str | None:
    """A warning if the replaced node still answers and runs engine containers."""
    old = ctx.old
    if old is None or old.name == ctx.new.name or old.address == ctx.new.address:
        return None
    from sparkrack.deployments.running import running

    try:
        with Fleet(ctx.inventory, [old]) as fleet:
            alive = running(fleet).alive
    except SparkrackError:
        return None
    if alive:
        return (f"warning: {old.name} still runs {alive[0].engine} rank {alive[0].rank} "
                f"({alive[0].name}); it is no longer in the inventory, so `invoke down` "
                f"will not stop it: stop it on the node (docker stop -t 300 {alive[0].name})")
    return None


def watchdog_after_head_swap(ctx: Context) -> str:
    """What the watchdog service needs once the head was replaced ('' without one)."""
    try:
        found = read_record(ctx.inventory.path)
    except UsageError:
        return ""
    if found is None:
        return ""
    if found.node == ctx.report.replace:
        return (f" The watchdog service ran on {found.node}: install it on a member "
                "(`invoke watch.install --on NODE`).")
    return (f" The watchdog service on {found.node} still reads the old head: `invoke "
            "watch.install` gives it this inventory.")


def next_steps(ctx: Context, plan: JoinPlan) -> str:
    """What the operator does after the onboarding (prefixed in a check)."""
    name = ctx.report.name
    if plan.rank is not None:
        text = (f"{name} takes rank {plan.rank} (was {ctx.report.replace}). The running "
                f"engine was not touched: {name} joins the TP group at the next "
                "`invoke roll` or `invoke up`.")
        if headmove.replaces_head(ctx):
            text += (f" {name} is the head now: the rack lock, the audit log and the "
                     "deployment records are on it; other operators need this hosts.yml "
                     "(their tasks still go to the old head)." + watchdog_after_head_swap(ctx))
    else:
        text = (f"{name} is a spare: provisioned, staged and verified, outside the TP group. "
                f"`invoke onboard {name} --address {ctx.report.address} --replace NODE` "
                "makes it a member (then `invoke roll` or `invoke up`).")
    return f"Check only. After a real run: {text}" if ctx.check else text
