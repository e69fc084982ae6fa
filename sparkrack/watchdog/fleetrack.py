"""The watchdog's view of a real rack: the deployment records, the engine containers, the
group poll, the nodes' facts and a restart, all through one warm Fleet; the PDU's reading
of the strip, from a thread of its own."""

from __future__ import annotations

import logging
import socket
import threading
import time

from sparkrack.core.errors import SparkrackError
from sparkrack.deployments import record
from sparkrack.deployments.ranks import engine_containers
from sparkrack.facts.node import facts_argv, parse_facts
from sparkrack.fleet import Fleet
from sparkrack.inventory import Inventory
from sparkrack.pdu.nodeoutlets import StripReading, read_strip, session_of
from sparkrack.pdu.snmp import Session
from sparkrack.watchdog.silence import GREETED, NO_ANSWER, REFUSED, TAKEN
from sparkrack.watchdog.watch import GroupWatch, stop_left_behind

FACTS_TIMEOUT_S = 15.0  # as `invoke status`: a stuck node must not hold up the others
STRIP_EVERY_S = 5.0  # between the PDU's readings (as the facts, for the metrics)
STRIP_STALE_S = 20.0  # a reading older than this is none (the PDU stopped answering)
TCP_TRY_S = 3.0  # a lost node's kernel takes a TCP connection within this, or is silent
GREETING_WAIT_S = 3.0  # sshd greets at once (RFC 4253 4.2); silent this long: it does not
log = logging.getLogger("sparkrack.watchdog")


def lock_holder(fleet: Fleet, inventory: Inventory) -> str | None:
    """Who holds the rack lock (an operator's task that changes the rack), or None.

    The watchdog steps aside, taking no action, while it is held: a `down` or a `roll` in
    progress looks like a broken group from outside. A stale lock (its holder died) does
    not count. A head whose lock cannot be read answers None: the group is then judged
    as it stands (its rank 0 lives there)."""
    import time

    from sparkrack.oplock.lock import LockError, live_holder

    try:
        holder = live_holder(fleet, inventory.head.name, timeout=FACTS_TIMEOUT_S)
    except LockError as error:
        log.warning("rack lock not readable: %s", error.line())
        return None
    return holder.describe(time.time()) if holder else None


def tcp_try(address: str, port: int, connect_s: float = TCP_TRY_S,
            greeting_s: float = GREETING_WAIT_S) -> str:
    """A TCP connection to address:port, and its first bytes awaited: GREETED (sshd spoke),
    TAKEN (connected, nothing said: the kernel runs, nothing above it), REFUSED (the
    kernel answered with a reset) or NO_ANSWER (nothing at all: no route, no reply)."""
    try:
        conn = socket.create_connection((address, port), timeout=connect_s)
    except ConnectionRefusedError:
        return REFUSED
    except OSError:
        return NO_ANSWER
    with conn:
        conn.settimeout(greeting_s)
        try:
            return GREETED if conn.recv(64) else TAKEN
        except OSError:
            return TAKEN


class StripReader:
    """Reads the PDU every STRIP_EVERY_S in a thread of its own, so a PDU that is slow or
    gone never holds up the group's poll. A reading older than STRIP_STALE_S is no reading;
    why the PDU is not read (its keys not in the service's environment, no answer) is
    logged once until it reads again."""

    def __init__(self, inventory: Inventory, clock=time.monotonic):
        self.inventory = inventory
        self.clock = clock
        self._latest: tuple[float, StripReading] | None = None
        self._said: str | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="pdu-strip", daemon=True).start()

    def latest(self) -> StripReading | None:
        latest = self._latest
        if latest is None or self.clock() - latest[0] > STRIP_STALE_S:
            return None
        return latest[1]

    def read_once(self, session: Session | None) -> Session | None:
        """One reading (kept as the latest); the session to use next time."""
        try:
            session = session or session_of(self.inventory)
            self._latest = (self.clock(), read_strip(self.inventory, session))
        except SparkrackError as error:
            if error.line() != self._said:
                log.warning("strip not read from the PDU: %s", error.line())
                self._said = error.line()
            return session
        self._said = None
        return session

    def _run(self) -> None:
        session = None
        while True:
            started = self.clock()
            session = self.read_once(session)
            time.sleep(max(0.0, STRIP_EVERY_S - (self.clock() - started)))


class FleetRack:
    """The rack the watchdog guards, reached through fleet (the inventory's nodes)."""

    def __init__(self, inventory: Inventory, fleet: Fleet):
        self.inventory = inventory
        self.fleet = fleet
        self._strip: StripReader | None = None

    def strip(self):
        """The PDU's latest reading of the strip (None: no pdu: section, or no fresh
        reading); read in a thread of its own (StripReader)."""
        if self.inventory.vars.pdu is None:
            return None
        if self._strip is None:
            self._strip = StripReader(self.inventory)
            self._strip.start()
        return self._strip.latest()

    def records(self) -> dict:
        """The head's deployment records (SparkrackError when it cannot be asked)."""
        return record.read(self.fleet, self.inventory)

    def ranks(self):
        """Every engine container on the rack, and {node: error} where docker did not answer."""
        return engine_containers(self.fleet)

    def group_watch(self, ranks, deployment) -> GroupWatch:
        """The poll of deployment's group, with its engine's health endpoint."""
        from sparkrack.engines import build_specs

        head = build_specs(self.inventory, deployment.engine, deployment.profile)[0]
        return GroupWatch(self.fleet, self.inventory, list(ranks), http_port=head.ports["http"],
                          health_path=head.health_path, stall_budget_s=head.stall_budget_s)

    def stop_left_behind(self, ranks) -> tuple[list, dict[str, str]]:
        """Stop ranks on nodes that answer again (kept for `invoke logs`); see
        watchdog.watch.stop_left_behind."""
        return stop_left_behind(self.inventory, ranks, remove=False)

    def facts(self) -> dict:
        """{node: NodeFacts, or None when it did not answer} from one round trip each."""
        return {r.node: parse_facts(r.stdout) if r.status == "ok" else None
                for r in self.fleet.run(facts_argv(), timeout=FACTS_TIMEOUT_S)}

    def ask(self, queries: dict) -> dict:
        """{node: Answers, or None when it did not answer} of one round trip asking each
        node its facts queries ({node: [Query]}; watchdog/railwatch.py)."""
        from sparkrack.facts.queries import answer
        from sparkrack.facts.queries import argv as gather_argv

        return {r.node: answer(r.stdout, queries[r.node]) if r.status == "ok" else None
                for r in self.fleet.run({node: gather_argv(asked) for node, asked
                                         in queries.items()}, timeout=FACTS_TIMEOUT_S)}

    def restart(self, deployment) -> None:
        """Start deployment's engine profile again in order: the same `up` as the operator's,
        gates included (a fresh burn, the power projection, the env files)."""
        from sparkrack.lifecycle.lanes import up
        from sparkrack.oplock import audit
        from sparkrack.oplock.guard import Guard

        say = lambda line: log.info("restart: %s", line)  # noqa: E731
        guard = Guard(self.inventory, "watchdog-restart", {
            "engine": deployment.engine, "profile": deployment.profile,
            "deployment": deployment.deployment_id}, on_event=say)
        guard.begin(wait=0)  # an operator holds the rack: no restart (LockHeld)
        try:
            with audit.active(guard.record):
                up(self.inventory, deployment.engine, deployment.profile, on_event=say)
        except BaseException as error:
            guard.end("failed", error=str(error).splitlines()[0] if str(error) else
                      type(error).__name__, exit_code=1)
            raise
        guard.end("ok")

    def record_action(self, deployment, poll, acted: str) -> list[str]:
        """Write the action on deployment's broken group, and the poll's evidence, to the
        audit log (watchdog.watch.record_action); the problems met."""
        from sparkrack.watchdog.watch import record_action

        return record_action(self.fleet, self.inventory, "watchdog", deployment.deployment_id,
                             poll, acted)

    def power_cycle(self, node: str, cause: str, deployment, own: str | None, keep):
        """Power-cycle node for cause and start deployment again (nodecycle.cycle_node: its
        own lock and audit record); a Cycled saying how it went."""
        from sparkrack.watchdog.nodecycle import cycle_node

        return cycle_node(self.inventory, node, cause, deployment, own=own, keep=keep,
                          say=lambda line: log.info("power-cycle: %s", line), by=self._by(own))

    def finish_cycle(self, pending, own: str | None):
        """Finish a cycle cut before this service started (nodecycle.finish)."""
        from sparkrack.watchdog.nodecycle import finish

        return finish(self.inventory, pending, say=lambda line: log.info("power-cycle: %s", line),
                      by=self._by(own))

    @staticmethod
    def _by(own: str | None) -> str:
        return f"the watchdog on {own}" if own else "the watchdog"

    def kernel_answers(self, node: str) -> str:
        """What a TCP connection to node's SSH port does (silence.py)."""
        target = self.inventory.node(node)
        return tcp_try(target.address, target.port)

    def lock_holder(self) -> str | None:
        """See lock_holder()."""
        return lock_holder(self.fleet, self.inventory)
