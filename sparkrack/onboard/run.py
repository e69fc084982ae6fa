"""`onboard`: make a bare Spark a member of the rack (or a staged spare), step by step. This
module is the sequence only: which steps, in which order, what a stop skips, the summary
and JSON of the report (docs/onboarding.md#the-code).

    report = onboard(inventory, "spark-09", "10.77.1.19", replace="spark-05",
                     fingerprint="SHA256:...", assume_yes=True)
    report.exit_code, [(s.name, s.verdict, s.summary) for s in report.steps]
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from sparkrack.core.errors import UsageError
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.values import address_problem, fabric_address_problem
from sparkrack.onboard import applyroles, baseline, join, scratch, stage, trust, verify
from sparkrack.onboard.context import Context, Event, OnboardReport, Options, Stop
from sparkrack.transfer.chain import DEFAULT_PYTHON, Progress

FABRIC_FLAG_FIX = "{flag} IPV4: the node's IPv4 address there, or leave it out"


def onboard(inventory: Inventory, name: str, address: str, *, replace: str | None = None,
            check: bool = False, fingerprint: str | None = None,
            confirm: Callable[[str], bool] | None = None, assume_yes: bool = False,
            waivers: Mapping[str, str] | None = None, roce_addr: str | None = None,
            roce_twin_addr: str | None = None,
            peer: str | None = None, burn_seconds: float = 5.0, bwlimit: float | None = None,
            full_verify: bool = False, python: str = DEFAULT_PYTHON,
            on_event: Event | None = None, on_progress: Progress | None = None
            ) -> OnboardReport:
    """Onboard name at address (docs/onboarding.md). Never raises for a node's failure: the
    report's steps say what happened; UsageError for bad arguments (nothing touched).

    confirm(question) -> bool asks the operator (None: non-interactive). assume_yes skips
    the question before the node is changed (step 3); it never stands in for the host key
    confirmation, which needs confirm() or a matching fingerprint. on_progress: the copies
    of step 4 (images, weights) as they go, per node."""
    waivers = baseline.check_waivers(waivers or {})
    old = _check_arguments(inventory, name, address, replace, roce_addr, roce_twin_addr, peer)
    report = OnboardReport(name, address, replace, check)
    options = Options(fingerprint=fingerprint, confirm=confirm, assume_yes=assume_yes,
                      waivers=waivers, peer=peer, burn_seconds=burn_seconds, bwlimit=bwlimit,
                      full_verify=full_verify, python=python, on_progress=on_progress)
    emit = on_event or (lambda kind, step, text: None)
    with tempfile.TemporaryDirectory(prefix="sparkrack-onboard-") as scratch_dir:
        ctx = Context(inventory, report, options, emit, Path(scratch_dir), old=old,
                      roce_addr=roce_addr, roce_twin_addr=roce_twin_addr)
        try:
            _sequence(ctx)
        except Stop:
            pass
        finally:
            ctx.close()
    for step in report.steps:
        if step.verdict == "pending":
            step.verdict = "skipped"
    return report


def _sequence(ctx: Context) -> None:
    """The steps in order; the first that stops (Stop) ends it. The scratch inventory is
    built again after step 2, which may have found the new node's fabric addresses."""
    scratch.build(ctx)
    trust.run(ctx)
    baseline.run(ctx)
    applyroles.confirm(ctx)
    scratch.build(ctx)
    applyroles.run(ctx)
    stage.run(ctx)
    verify.run(ctx)
    join.run(ctx)


def _check_arguments(inventory: Inventory, name: str, address: str, replace: str | None,
                     roce_addr: str | None, roce_twin_addr: str | None,
                     peer: str | None) -> Node | None:
    """UsageError for arguments that cannot work; the node being replaced, if any."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name == "all":
        raise UsageError(f"invalid node name {name!r}", fix="e.g. spark-09")
    for value, flag, fix in (
            (address, "--address", "--address ADDR: an IPv4/IPv6 address or a DNS name"),
            (roce_addr, "--roce-addr", FABRIC_FLAG_FIX.format(flag="--roce-addr")),
            (roce_twin_addr, "--roce-twin-addr", FABRIC_FLAG_FIX.format(flag="--roce-twin-addr"))):
        problem = address_problem(value) if value is not None else None
        if problem:
            raise UsageError(f"{flag} {value!r} {problem}", fix=fix)
    for value, flag in ((roce_addr, "--roce-addr"), (roce_twin_addr, "--roce-twin-addr")):
        problem = fabric_address_problem(value) if value not in (None, address) else None
        if problem:
            raise UsageError(f"{flag} {value} {problem}, but a fabric address is IPv4 "
                             "(docs/inventory.md#values)", fix=FABRIC_FLAG_FIX.format(flag=flag))
    members = {n.name: n for n in inventory.nodes}
    old = None
    if replace is not None:
        if replace not in members:
            raise UsageError(f"--replace {replace}: not a member of the rack",
                             fix="members: " + ", ".join(members))
        old = members[replace]
    if name in members and name != replace:
        raise UsageError(f"{name} is already a member of the rack (rank {members[name].rank})",
                         fix=f"to put new hardware under that name: --replace {name}")
    for node in (*inventory.nodes, *inventory.spares):
        if node.name in (name, replace):
            continue
        if node.address == address:
            raise UsageError(f"address {address} belongs to {node.name}",
                             fix="give the new node's own address")
        for flag, value in (("--roce-addr", roce_addr), ("--roce-twin-addr", roce_twin_addr)):
            if value and value in (node.roce_addr, node.roce_twin_addr):
                raise UsageError(f"{flag} {value} belongs to {node.name}")
    if peer is not None and (peer not in members or peer == replace):
        raise UsageError(f"--peer {peer}: not a member that stays in the rack",
                         fix="members: " + ", ".join(n for n in members if n != replace))
    return old


def render_summary(report: OnboardReport) -> list[list[str]]:
    """Rows for the summary table: step, verdict, seconds, summary."""
    return [[f"{s.number} {s.name}", s.verdict, f"{s.seconds:.1f}", s.summary]
            for s in report.steps]


def as_json(report: OnboardReport) -> dict:
    """The report as JSON-ready data (`invoke onboard --json`)."""
    return {
        "name": report.name, "address": report.address, "replace": report.replace,
        "check": report.check, "fingerprint": report.fingerprint, "roce_addr": report.roce_addr,
        "roce_twin_addr": report.roce_twin_addr,
        "rank": report.rank, "joined": report.joined, "message": report.message,
        "exit_code": report.exit_code,
        "steps": [dataclasses.asdict(s) for s in report.steps],
        "differences": [dataclasses.asdict(d) for d in report.differences],
        "facts": {n: f.row() for n, f in report.facts.items() if f.ok},
        "images": [o.line() for o in report.images],
        "weights": None if report.weights is None else report.weights.as_dict(),
        "hosts_diff": report.join.diff() if report.join else "",
    }


__all__ = ["as_json", "onboard", "render_summary"]
