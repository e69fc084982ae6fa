"""`check_profile`: every rule against the launch specs an engine profile would run
(`check_lane`: the same for a lane resolved already, engines/lane.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sparkrack.core.errors import InventoryError, UsageError, allowed_fix
from sparkrack.engines import (
    EngineDef,
    EngineLane,
    LaunchSpec,
    Profile,
    lane_specs,
    load_model,
    resolve_lane,
)
from sparkrack.engines.datafile import did_you_mean
from sparkrack.engines.option_names import checked_against
from sparkrack.facts.kernel import KernelFacts
from sparkrack.inventory import Inventory
from sparkrack.rules.code_checks import CODE_CHECKS
from sparkrack.rules.data_checks import run_data_check
from sparkrack.rules.findings import ERROR, CheckReport, Finding
from sparkrack.rules.rule import CodeCheck, Rule
from sparkrack.rules.ruleset import all_rules, launch_flags
from sparkrack.rules.target import Hit, Skip, Target


def check_profile(inventory: Inventory, engine: str, profile: str, *,
                  node_kernels: Mapping[str, KernelFacts] | None = None,
                  specs: tuple[LaunchSpec, ...] | None = None) -> CheckReport:
    """Run every rule on engine's profile for this inventory and report what they find.

    specs are the launch specs to check (default: build_specs for the profile, with no
    secrets); pass the ones about to be started so that exactly they are checked.
    node_kernels maps node names to their host kernel's facts (release, command line, CMA
    counters) for HOST-KERNEL (None: skipped, noted).
    UsageError for an unknown engine, profile or node, InventoryError for a bad file or
    a waiver of an unknown rule.
    """
    lane = resolve_lane(inventory, engine, profile, image=specs[0].image if specs else None)
    return check_lane(inventory, lane, node_kernels=node_kernels, specs=specs)


def check_lane(inventory: Inventory, lane: EngineLane, *,
               node_kernels: Mapping[str, KernelFacts] | None = None,
               specs: tuple[LaunchSpec, ...] | None = None) -> CheckReport:
    """check_profile for a lane resolved already (engines/lane.py): its profile file is not
    read again."""
    definition, chosen = lane.definition, lane.profile
    engine, profile = definition.name, chosen.name
    rules = all_rules()
    _check_waivers(definition, chosen, rules)
    _check_node_names(inventory, node_kernels)
    notes: list[str] = []
    if specs is None:
        specs = _built_specs(inventory, lane, notes)
    _check_specs(specs, engine, profile)
    target = Target(inventory=inventory, engine=definition, profile=chosen,
                    model=load_model(inventory.path, inventory.vars.model_name), specs=specs,
                    node_kernels=node_kernels, launch=launch_flags(engine))
    findings: list[Finding] = []
    version = definition.version.version if definition.version else None
    unverified: list[Rule] = []
    for rule in rules:
        if engine not in rule.engines or not rule.when.matches_model(target.model):
            continue
        if version and not rule.verified(engine, version):
            unverified.append(rule)
        outcomes = list(_run(rule, target))
        notes += [f"{rule.id} not checked: {o.reason}" for o in outcomes if isinstance(o, Skip)]
        findings += _findings(rule, [o for o in outcomes if isinstance(o, Hit)],
                              chosen.waivers.get(rule.id))
    if unverified:
        named = ", ".join(f"{rule.id} ({rule.verified_text(engine)})" for rule in unverified)
        notes.append(f"not verified on {engine} {version}, run as written for the versions "
                     f"named: {named} (verified_on in sparkrack/data/rules.yml)")
    fired = {finding.rule for finding in findings}
    notes += [f"waiver of {rule_id} unused: the rule found nothing" for rule_id in chosen.waivers
              if rule_id not in fired]
    findings.sort(key=lambda finding: (not finding.blocking, finding.severity != ERROR))
    return CheckReport(engine=engine, profile=profile, node_count=len(inventory.nodes),
                       findings=tuple(findings), notes=tuple(notes), waivers=chosen.waivers,
                       checked_against=checked_against(definition.version, definition.options),
                       engine_version=version,
                       unverified=tuple(rule.id for rule in unverified))


def _run(rule: Rule, target: Target) -> Iterable[Hit | Skip]:
    """The outcomes of one rule's check."""
    if isinstance(rule.check, CodeCheck):
        return CODE_CHECKS[rule.check.name](target)
    return run_data_check(rule, target)


def _findings(rule: Rule, hits: list[Hit], waiver: str | None) -> list[Finding]:
    """One finding per distinct problem, with every node it occurs on (in rank order)."""
    grouped: dict[tuple[str, str], list[Hit]] = {}
    for hit in hits:
        grouped.setdefault((hit.severity or rule.severity, hit.message), []).append(hit)
    findings = []
    for (severity, message), group in grouped.items():
        placed = sorted({(hit.rank, hit.node) for hit in group if hit.node is not None})
        findings.append(Finding(
            rule=rule.id, severity=severity, message=f"{rule.message}: {message}",
            nodes=tuple(node for _, node in placed), ranks=tuple(rank for rank, _ in placed),
            waived=waiver is not None, waiver_reason=waiver))
    return findings


def _built_specs(inventory: Inventory, lane: EngineLane, notes: list[str]) -> tuple[LaunchSpec, ...]:
    """The profile's launch specs (no secrets), or none, noted, when tp_size does not let
    build_specs build them (TP-GROUP reports it)."""
    if inventory.vars.tp_size != len(inventory.nodes):
        notes.append("launch specs not built (tp_size is not the node count, see TP-GROUP): "
                     "the per-rank rules did not run")
        return ()
    return lane_specs(inventory, lane)


def _check_waivers(definition: EngineDef, profile: Profile, rules: tuple[Rule, ...]) -> None:
    """InventoryError when the profile waives a rule that does not exist."""
    known = [rule.id for rule in rules]
    for rule_id in profile.waivers:
        if rule_id not in known:
            raise InventoryError(
                definition.file, None, f"profile '{profile.name}' waives unknown rule "
                f"'{rule_id}'{did_you_mean(rule_id, known)}",
                fix=allowed_fix("rules", known, "`invoke check --list`"))


def _check_node_names(inventory: Inventory,
                      node_kernels: Mapping[str, KernelFacts] | None) -> None:
    """UsageError when node facts name a node the inventory does not have."""
    names = [node.name for node in inventory.nodes]
    for name in node_kernels or {}:
        if name not in names:
            raise UsageError(f"kernel given for unknown node '{name}'",
                             fix="known nodes: " + ", ".join(names))


def _check_specs(specs: tuple[LaunchSpec, ...], engine: str, profile: str) -> None:
    """UsageError when given specs are not the engine profile's."""
    for spec in specs:
        if (spec.engine, spec.profile) != (engine, profile):
            raise UsageError(f"launch spec of rank {spec.rank} is for {spec.engine} "
                             f"{spec.profile}, not {engine} {profile}",
                             fix="check the specs that are about to start")
