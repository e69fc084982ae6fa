"""`onboard`: make a bare Spark a member of the rack (or a staged spare), step by step.

    report = onboard(inventory, "spark-09", "10.77.1.19", replace="spark-05",
                     fingerprint="SHA256:...", assume_yes=True)
    report.exit_code, [(s.name, s.verdict, s.summary) for s in report.steps]

Steps, each with a verdict (ok, changed, would, refused, failed, skipped):
1. trust      fetch the host key, show it, record it in known_hosts when confirmed
2. baseline   facts of the new node and of every member in the same run; differences
3. provision  the roles (all of roles/site.yml but engine_images) on the new node only
4. stage      the rack's images and the model weights from a peer (resumable, verified)
5. verify     engine-port reachability both ways, burn check of the clocks
6. join       hosts.yml: in place of --replace OLD with its rank, else as a spare

Steps 2-5 run against a scratch copy of the inventory that already holds the new node
(as the member it will be, or appended as a spare), with a scratch known_hosts; the
inventory's files change only at step 1 (known_hosts, when confirmed) and step 6.
`check=True` runs steps 1-2 and says what 3-6 would do, writing nothing anywhere, not
even known_hosts, and changing nothing on any node (without a terminal or --fingerprint,
a check looks with the key UNCONFIRMED, read-only, and says so; a real run refuses).

Confirmation: the host key needs confirm() (a terminal) or a matching fingerprint; then,
before the node is changed, confirm() again unless assume_yes (`--yes`). Step 1 records
the key when it is confirmed, even if a later step refuses: the node's identity was
established; the inventory itself (hosts.yml, host_vars) changes only at step 6.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


from sparkrack.atomic import write_atomically
from sparkrack.errors import SparkrackError, UsageError
from sparkrack.fleet import Fleet, hostkeys
from sparkrack.fleet.ssh import explain, who
from sparkrack.inventory import Inventory, Node, load_inventory
from sparkrack.inventory_schema import address_problem
from sparkrack.onboard import baseline, join, stage, trust, verify
from sparkrack.provision import provision, roles_path, site_roles
from sparkrack.rules.ruleset import all_rules
from sparkrack.transfer.chain import DEFAULT_PYTHON

STEPS = ("trust", "baseline", "provision", "stage", "verify", "join")
IMAGE_ROLE = "engine_images"  # step 4 brings the rack's own image IDs from a peer instead

Event = Callable[[str, "Step", str], None]  # (start | line | end, step, text)


@dataclass
class Step:
    number: int
    name: str
    verdict: str = "pending"  # ok | changed | would | refused | failed | skipped | pending
    summary: str = ""
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bad(self) -> bool:
        return self.verdict in ("refused", "failed")


@dataclass
class OnboardReport:
    name: str
    address: str
    replace: str | None
    check: bool
    steps: list[Step] = field(default_factory=lambda: [Step(i + 1, n) for i, n in enumerate(STEPS)])
    fingerprint: str = ""
    roce_addr: str | None = None
    differences: list[baseline.Difference] = field(default_factory=list)
    facts: dict[str, baseline.Facts] = field(default_factory=dict)
    provision: object | None = None
    images: list[stage.ImageOutcome] = field(default_factory=list)
    weights: stage.StageReport | None = None
    verify: verify.VerifyReport | None = None
    join: join.JoinPlan | None = None
    rank: int | None = None
    joined: bool = False
    message: str = ""

    def step(self, name: str) -> Step:
        return self.steps[STEPS.index(name)]

    @property
    def exit_code(self) -> int:
        return 1 if any(s.bad for s in self.steps) else 0


class _Stop(Exception):
    """A step refused or failed: later steps are skipped."""


def known_bad_kernels() -> tuple[str, ...]:
    """Host kernels the rules (HOST-KERNEL) name as bad."""
    return tuple(sorted({value for rule in all_rules()
                         if getattr(rule.check, "kind", None) == "kernel_not_in"
                         for value in rule.check.values}))


def onboard(inventory: Inventory, name: str, address: str, *, replace: str | None = None,
            check: bool = False, fingerprint: str | None = None,
            confirm: Callable[[str], bool] | None = None, assume_yes: bool = False,
            waivers: Mapping[str, str] | None = None, roce_addr: str | None = None,
            peer: str | None = None, burn_seconds: float = 5.0, bwlimit: float | None = None,
            full_verify: bool = False, python: str = DEFAULT_PYTHON,
            on_event: Event | None = None) -> OnboardReport:
    """Onboard name at address (see the module doc). Never raises for a node's failure: the
    report's steps say what happened; UsageError for bad arguments (nothing touched).

    confirm(question) -> bool asks the operator (None: non-interactive). assume_yes skips
    the question before the node is changed (step 3); it never stands in for the host key
    confirmation, which needs confirm() or a matching fingerprint."""
    waivers = baseline.check_waivers(waivers or {})
    old = _check_arguments(inventory, name, address, replace, roce_addr, peer)
    report = OnboardReport(name, address, replace, check)
    emit = on_event or (lambda kind, step, text: None)
    with tempfile.TemporaryDirectory(prefix="sparkrack-onboard-") as scratch_dir:
        run = _Run(inventory, report, Path(scratch_dir), emit, old=old, fingerprint=fingerprint,
                   confirm=confirm, assume_yes=assume_yes, waivers=waivers,
                   roce_addr=roce_addr, peer=peer, burn_seconds=burn_seconds, bwlimit=bwlimit,
                   full_verify=full_verify, python=python)
        try:
            run.all()
        except _Stop:
            pass
        finally:
            run.close()
    for step in report.steps:
        if step.verdict == "pending":
            step.verdict = "skipped"
    return report


def _check_arguments(inventory: Inventory, name: str, address: str, replace: str | None,
                     roce_addr: str | None, peer: str | None) -> Node | None:
    """UsageError for arguments that cannot work; the node being replaced, if any."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name == "all":
        raise UsageError(f"invalid node name {name!r}", fix="e.g. spark-09")
    for value, flag in ((address, "--address"), (roce_addr, "--roce-addr")):
        problem = address_problem(value) if value is not None else None
        if problem:
            raise UsageError(f"{flag} {value!r} {problem}",
                             fix=f"{flag} ADDR: an IPv4/IPv6 address or a DNS name")
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
        if roce_addr and node.roce_addr == roce_addr:
            raise UsageError(f"--roce-addr {roce_addr} belongs to {node.name}")
    if peer is not None and (peer not in members or peer == replace):
        raise UsageError(f"--peer {peer}: not a member that stays in the rack",
                         fix="members: " + ", ".join(n for n in members if n != replace))
    return old


class _Run:
    """One onboarding's state between the steps."""

    def __init__(self, inventory: Inventory, report: OnboardReport, scratch: Path, emit: Event,
                 **options):
        self.inventory = inventory
        self.report = report
        self.scratch = scratch
        self.emit = emit
        self.o = options
        self.old: Node | None = options["old"]
        self.known_hosts = scratch / "known_hosts"
        self.fleet: Fleet | None = None
        self.work: Inventory | None = None
        self.new: Node | None = None
        self.members: tuple[Node, ...] = ()
        self.key: hostkeys.HostKey | None = None
        self.roce_addr: str | None = options["roce_addr"]

    def close(self) -> None:
        if self.fleet is not None:
            self.fleet.close()
            self.fleet = None

    # --- plumbing -----------------------------------------------------------------------
    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        step = self.report.step(name)
        started = time.monotonic()
        self.emit("start", step, "")
        try:
            yield step
        except _Stop:
            step.seconds = time.monotonic() - started
            self.emit("end", step, "")
            raise
        except SparkrackError as error:
            self._set(step, "failed", error.line())
        step.seconds = time.monotonic() - started
        self.emit("end", step, "")
        if step.bad:
            raise _Stop()

    def line(self, step: Step, text: str) -> None:
        step.details.append(text)
        self.emit("line", step, text)

    def _set(self, step: Step, verdict: str, summary: str) -> None:
        step.verdict, step.summary = verdict, summary

    def stop(self, step: Step, verdict: str, summary: str) -> None:
        self._set(step, verdict, summary)
        raise _Stop()

    def build(self, roce_addr: str | None) -> None:
        """The scratch inventory holding the new node, and a fleet over it."""
        self.close()
        report, inventory = self.report, self.inventory
        plan = join.plan_join(inventory, report.name, report.address, roce_addr,
                              replace=report.replace, stamp="scratch")
        copy = self.scratch / f"inventory-{len(list(self.scratch.glob('inventory-*')))}"
        join.materialize_light(inventory.path, copy, plan)
        edited = load_inventory(copy)
        original = {n.name: n for n in inventory.nodes}

        def back(node: Node) -> Node:  # key files as the real inventory resolves them
            key = node.key_file
            if key is not None and copy in key.parents:
                key = inventory.path / key.relative_to(copy)
            return dataclasses.replace(node, key_file=key)

        if report.replace is not None:
            self.new = back(edited.node(report.name))
            nodes = tuple(original.get(n.name, back(n)) if n.name != report.name else self.new
                          for n in edited.nodes)
        else:
            self.new = back(next(n for n in edited.spares if n.name == report.name))
            nodes = (*[original.get(n.name, back(n)) for n in edited.nodes], self.new)
        self.members = tuple(n for n in nodes if n.name != report.name)
        rack_vars = dataclasses.replace(edited.vars, known_hosts_file=str(self.known_hosts))
        self.work = Inventory(path=copy, nodes=nodes, vars=rack_vars, groups=edited.groups)
        self.fleet = Fleet(self.work, nodes)

    # --- the steps ----------------------------------------------------------------------
    def all(self) -> None:
        self.build(self.roce_addr)
        self.trust()
        self.baseline()
        self.ask_to_proceed()
        self.build(self.roce_addr)
        self.provision()
        self.stage()
        self.verify()
        self.join()

    def trust(self) -> None:
        report, new, old = self.report, self.new, self.old
        real = self.inventory.known_hosts_path
        with self.step("trust") as step:
            keys = hostkeys.read_known_hosts(real)
            ident = trust.host_id(new.address, new.port)
            own = [ident, new.name]
            current = next((n for n in (*self.inventory.nodes, *self.inventory.spares)
                            if n.name == new.name and n.name != report.replace), None)
            if current is not None:  # a spare onboarded again (perhaps at a new address)
                own.append(trust.host_id(current.address, current.port))
            replaced = []  # the retired node's ids, where its key may differ from the new one
            if old is not None and (old.address == new.address or old.name == new.name):
                replaced = [trust.host_id(old.address, old.port), old.name]
            own = [i for i in dict.fromkeys(own) if i not in replaced]
            recorded = hostkeys.recorded_keys(keys, [*own, *replaced])
            preferred = [t for ident_keys in recorded.values() for t in ident_keys]
            try:
                self.key = hostkeys.fetch_host_key(new, list(dict.fromkeys(preferred)))
            except hostkeys.FETCH_ERRORS as error:
                self.stop(step, "failed", explain(new, real, error))
            report.fingerprint = hostkeys.fingerprint(self.key)
            decision = trust.decide(self.key, recorded, own, replaced, real, who(new))
            self.line(step, decision.message)
            if decision.state == trust.CHANGED:
                self.stop(step, "refused", decision.message)
            text = real.read_text() if real.is_file() else ""
            if decision.state == trust.KNOWN:
                self.known_hosts.write_text(text)
                self._set(step, "ok", f"{self.key.get_name()} {report.fingerprint} already "
                          "trusted")
                return
            self._confirm_key(step, decision)
            updated = trust.known_hosts_text(text, ident, self.key, decision.stale)
            self.known_hosts.write_text(updated)
            if report.check:
                confirmed = "" if self.o["fingerprint"] or self.o["confirm"] else \
                    " once confirmed (--fingerprint)"
                self._set(step, "would", f"would record {self.key.get_name()} "
                          f"{report.fingerprint} in {real}{confirmed} (check: not written)")
                return
            write_atomically(real, updated)
            self._set(step, "changed", f"recorded {self.key.get_name()} {report.fingerprint} "
                      f"for {ident} in {real}")

    def _confirm_key(self, step: Step, decision: trust.Decision) -> None:
        shown = self.report.fingerprint
        given, confirm = self.o["fingerprint"], self.o["confirm"]
        if given is not None:
            if not trust.same_fingerprint(given, shown):
                self.stop(step, "refused", f"--fingerprint {given} does not match the key "
                          f"{self.report.name} offers ({shown}): not trusted")
            self.line(step, f"--fingerprint matches {shown}")
            return
        if confirm is None and self.report.check:
            self.line(step, f"UNCONFIRMED {shown}: check mode uses it for this read-only look "
                      "and records it nowhere; a real run needs --fingerprint or a terminal")
            return
        if confirm is None:
            self.stop(step, "refused", (
                f"{self.report.name} offers {self.key.get_name()} {shown}; not confirmed "
                "(non-interactive): pass --fingerprint with the value read on the node's "
                "console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)"))
        question = (f"Trust {self.report.name} ({self.report.address}) with host key "
                    f"{self.key.get_name()} {shown}?")
        if decision.stale:
            question += f" It replaces the recorded key of {', '.join(decision.stale)}."
        if not confirm(question):
            self.stop(step, "refused", "host key not confirmed by the operator")
        self.line(step, "confirmed by the operator")

    def baseline(self) -> None:
        report, new = self.report, self.new
        with self.step("baseline") as step:
            facts = baseline.gather(self.fleet, [*self.members, new])
            report.facts = facts
            mine = facts[new.name]
            if not mine.ok:
                hint = ""
                if "refused key" in (mine.error or ""):
                    key = new.key_file
                    hint = (f"; put the rack's public key on the node first: ssh-copy-id -i "
                            f"{key}.pub {new.user}@{new.address}")
                self.stop(step, "failed", f"{mine.error}{hint}")
            members = {n.name: facts[n.name] for n in self.members}
            down = [f"{n}: {f.error}" for n, f in members.items() if not f.ok]
            for line in down:
                self.line(step, f"member not in the baseline: {line}")
            if len(down) == len(members):
                self.stop(step, "failed", "no member answered: no baseline to compare with")
            self._resolve_roce_addr(step, mine)
            report.differences = baseline.compare(
                mine, members, hcas=new.vars.nccl_ib_hca,
                socket_ifname=new.vars.nccl_socket_ifname,
                known_bad_kernels=known_bad_kernels(), waivers=self.o["waivers"])
            for difference in report.differences:
                self.line(step, difference.line())
            refusing = [d for d in report.differences if d.refuses]
            if refusing:
                self.stop(step, "refused", "refused: " + "; ".join(
                    f"{d.kind} ({d.what}: {d.node_value}, rack {d.rack_value})" for d in refusing)
                    + " (waive with --waive KIND=REASON only if you know it is safe)")
            notes = len(report.differences)
            self._set(step, "ok", f"{mine.gpu_name}, driver {mine.driver}, kernel "
                      f"{mine.kernel}; {len(members) - len(down)} member(s) compared, "
                      f"{notes} difference(s), none refusing" if notes else
                      f"{mine.gpu_name}, driver {mine.driver}, kernel {mine.kernel}: matches "
                      f"the {len(members) - len(down)} member(s) compared")

    def _resolve_roce_addr(self, step: Step, mine: baseline.Facts) -> None:
        """The new node's fabric address: --roce-addr, else its management address when the
        members have no separate one, else the IPv4 on its nccl_socket_ifname."""
        if self.roce_addr is not None:
            self.report.roce_addr = self.roce_addr
            return
        if all(m.roce_addr == m.address for m in self.members):
            self.report.roce_addr = self.new.address
            return
        dev = self.new.vars.nccl_socket_ifname
        found = (mine.netdevs.get(dev).ipv4 if mine.netdevs.get(dev) else "").split("/")[0]
        if not found or address_problem(found):
            self.stop(step, "failed", f"the members have their own roce_addr, and {dev} on "
                      f"{self.new.name} has no IPv4 address: pass --roce-addr")
        self.line(step, f"roce_addr {found} (the IPv4 address of {dev})")
        self.roce_addr = self.report.roce_addr = found

    def ask_to_proceed(self) -> None:
        if self.report.check or self.o["assume_yes"]:
            return
        step = self.report.step("provision")
        confirm = self.o["confirm"]
        if confirm is None:
            self.stop(step, "refused", "not confirmed (non-interactive): pass --yes to "
                      "provision, stage, verify and join the node")
        what = (f"replace {self.report.replace} (rank {self.old.rank})" if self.old
                else "join as a spare")
        if not confirm(f"Provision {self.report.name}, stage images and weights on it, "
                       f"verify it and {what}?"):
            self.stop(step, "refused", "not confirmed by the operator")

    def provision(self) -> None:
        report, new = self.report, self.new
        roles = [r for r in site_roles(roles_path(self.work.path)) if r != IMAGE_ROLE]
        with self.step("provision") as step:
            result = provision(self.work, (new,), roles=roles, check=report.check)
            report.provision = result
            run = result.node(new.name)
            changes = [c for c in run.plan if c.changed]
            for change in changes:
                self.line(step, f"{change.role}: {change.task}: {change.summary}")
            counts = result.recap(new.name)
            if report.check:
                if result.exit_code:
                    self.stop(step, "failed", run.error or "the plan failed")
                self._set(step, "would", f"would apply {len(changes)} change(s) of roles "
                          f"{', '.join(roles)}")
                return
            if result.exit_code:
                bad = [c for c in run.outcomes() if c.status == "failed"]
                self.stop(step, "failed", run.error or (bad[0].summary if bad else "failed"))
            self._set(step, "changed" if counts["changed"] else "ok",
                      f"{counts['changed']} changed, {counts['ok']} ok ({', '.join(roles)}; "
                      f"{result.seconds:.1f} s)")

    def _peers(self) -> list[str]:
        """Members to take data from, preferred first: --peer, then by rank from the last
        (the head serves the API: spared when possible)."""
        peer = self.o["peer"]
        order = sorted((m for m in self.members if m.name != self.work.head.name),
                       key=lambda m: -m.rank)
        names = [m.name for m in order] + ([self.work.head.name]
                                           if self.work.head.name != self.new.name else [])
        if peer:
            names = [peer] + [n for n in names if n != peer]
        return names

    def stage(self) -> None:
        report, new, work = self.report, self.new, self.work
        with self.step("stage") as step:
            refs = list(work.vars.images.values())
            member_facts = {n: f for n, f in report.facts.items() if n != new.name and f.ok}
            targets = stage.rack_images(refs, member_facts, [m.name for m in self.members],
                                        work.head.name if work.head.name != new.name
                                        else self.members[0].name)
            peers = self._peers()
            report.images = stage.stage_images(self.fleet, targets, member_facts, new, peers,
                                               python=self.o["python"], check=report.check)
            for outcome in report.images:
                self.line(step, f"image {outcome.line()}")
            image_errors = [o for o in report.images if o.error]
            report.weights, missing = stage.stage_weights(
                self.fleet, self.members, new, peers, work.vars.model_path,
                python=self.o["python"], bwlimit=self.o["bwlimit"],
                full_verify=self.o["full_verify"], check=report.check,
                on_event=lambda text: self.line(step, f"weights: {text}"))
            if missing:
                self.stop(step, "failed", missing)
            weights = report.weights
            problems = [o.line() for o in image_errors] + weights.errors
            if problems:
                self.stop(step, "failed", "; ".join(problems))
            if report.check:
                self._set(step, "would", f"images: {sum(not o.present for o in report.images)} "
                          f"to send; weights: {weights.summary()}")
                return
            changed = any(o.transfer for o in report.images) or weights.copied
            self._set(step, "changed" if changed else "ok",
                      f"images: {', '.join(o.line() for o in report.images)}; weights: "
                      f"{weights.summary()}")

    def verify(self) -> None:
        report, new = self.report, self.new
        with self.step("verify") as step:
            plan = verify.engine_ports(self.work)
            if report.check:
                ports = ", ".join(f"{p} ({plan.names[p]})" for p in (*plan.every_rank,
                                                                     *plan.head_only))
                self._set(step, "would", f"would probe ports {ports} between {new.name} and "
                          f"{len(self.members)} members both ways, and burn {new.name}'s GPU "
                          f"for {self.o['burn_seconds']:g} s")
                return
            result = verify.verify_node(self.fleet, self.work, new, self.members,
                                        burn_seconds=self.o["burn_seconds"],
                                        python=self.o["python"])
            report.verify = result
            for note in result.notes:
                self.line(step, note)
            for reach in result.failed:
                self.line(step, f"UNREACHABLE {reach.source} -> {reach.target}:{reach.port} "
                          f"({plan.names.get(reach.port, '?')}): {reach.detail}")
            for error in result.errors:
                self.line(step, error)
            burned = result.burn
            if burned is not None:
                self.line(step, f"burn: {burned.verdict}: {burned.reason}")
            probes = len(result.reach)
            if not result.ok:
                why = (f"{len(result.failed)} of {probes} port probes failed" if result.failed
                       else "; ".join(result.errors) if result.errors
                       else f"burn {burned.verdict}: {burned.reason}" if burned else "no burn")
                self.stop(step, "failed", why)
            self._set(step, "ok", f"{probes} port probes ok both ways; env files as provisioned; "
                      f"burn {burned.summary}")

    def join(self) -> None:
        report, inventory = self.report, self.inventory
        with self.step("join") as step:
            plan = join.plan_join(inventory, report.name, report.address, self.roce_addr,
                                  replace=report.replace)
            join.check_plan(inventory, plan, report.name)
            report.join, report.rank = plan, plan.rank
            for line in plan.diff().splitlines():
                if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
                    self.line(step, f"hosts.yml {line}")
            for old_path, new_path in plan.moved_host_vars.items():
                self.line(step, f"{old_path} -> {new_path} (the old hardware's overrides)")
            where = (f"rank {plan.rank} in place of {report.replace}" if plan.rank is not None
                     else "a spare (outside the TP group)")
            unchanged = plan.hosts_after == plan.hosts_before and not plan.moved_host_vars
            if report.check:
                self._set(step, "ok" if unchanged else "would",
                          f"{report.name} already in {inventory.path / 'hosts.yml'} as {where}"
                          if unchanged else f"would write {report.name} into "
                          f"{inventory.path / 'hosts.yml'} as {where}")
                report.message = self._next_steps(plan)
                return
            if unchanged:
                report.joined = True
                report.message = self._next_steps(plan)
                self._set(step, "ok", f"{report.name} already in "
                          f"{inventory.path / 'hosts.yml'} as {where}")
                return
            join.apply_join(inventory, plan)
            report.joined = True
            self._forget_old_key(step)
            warning = self._old_still_running()
            if warning:
                self.line(step, warning)
            report.message = self._next_steps(plan)
            self._set(step, "changed", f"{report.name} written into "
                      f"{inventory.path / 'hosts.yml'} as {where}")

    def _forget_old_key(self, step: Step) -> None:
        old, new = self.old, self.new
        if old is None or old.address == new.address:
            return
        real = self.inventory.known_hosts_path
        if not real.is_file():
            return
        text = real.read_text()
        ids = [trust.host_id(old.address, old.port)]
        if old.name != new.name:
            ids.append(old.name)
        kept = trust.without_ids(text, ids)
        if kept != text:
            write_atomically(real, kept)
            self.line(step, f"{real}: removed the key of {old.name} ({old.address})")

    def _old_still_running(self) -> str | None:
        """A warning if the replaced node still answers and runs engine containers."""
        old = self.old
        if old is None or old.name == self.new.name or old.address == self.new.address:
            return None
        from sparkrack.lifecycle.running import running

        try:
            with Fleet(self.inventory, [old]) as fleet:
                alive = running(fleet).alive
        except SparkrackError:
            return None
        if alive:
            return (f"warning: {old.name} still runs {alive[0].engine} rank {alive[0].rank} "
                    f"({alive[0].name}); it is no longer in the inventory, so `invoke down` "
                    f"will not stop it: stop it on the node (docker stop -t 300 {alive[0].name})")
        return None

    def _next_steps(self, plan: join.JoinPlan) -> str:
        text = self._after(plan)
        return f"Check only. After a real run: {text}" if self.report.check else text

    def _after(self, plan: join.JoinPlan) -> str:
        name = self.report.name
        if plan.rank is not None:
            return (f"{name} takes rank {plan.rank} (was {self.report.replace}). The running "
                    f"engine was not touched: {name} joins the TP group at the next "
                    "`invoke roll` or `invoke up`.")
        return (f"{name} is a spare: provisioned, staged and verified, outside the TP group. "
                f"`invoke onboard {name} --address {self.report.address} --replace NODE` "
                "makes it a member (then `invoke roll` or `invoke up`).")


def render_summary(report: OnboardReport) -> list[list[str]]:
    """Rows for the summary table: step, verdict, seconds, summary."""
    return [[f"{s.number} {s.name}", s.verdict, f"{s.seconds:.1f}", s.summary]
            for s in report.steps]


def as_json(report: OnboardReport) -> dict:
    return {
        "name": report.name, "address": report.address, "replace": report.replace,
        "check": report.check, "fingerprint": report.fingerprint, "roce_addr": report.roce_addr,
        "rank": report.rank, "joined": report.joined, "message": report.message,
        "exit_code": report.exit_code,
        "steps": [dataclasses.asdict(s) for s in report.steps],
        "differences": [dataclasses.asdict(d) for d in report.differences],
        "facts": {n: f.row() for n, f in report.facts.items() if f.ok},
        "images": [o.line() for o in report.images],
        "weights": None if report.weights is None else report.weights.as_dict(),
        "hosts_diff": report.join.diff() if report.join else "",
    }


__all__ = ["OnboardReport", "Step", "as_json", "known_bad_kernels", "onboard",
           "render_summary"]
