"""Several operators: `lock` (who holds the rack lock), `unlock --force REASON`, `log`."""

from invoke.exceptions import Exit

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import task
from sparkrack.core import console
from sparkrack.core.errors import UsageError
from sparkrack.core.since import HELP as SINCE_HELP
from sparkrack.core.since import parse_since

COLLECTION = None


def _head_fleet(rack):
    from sparkrack.fleet import Fleet

    return Fleet(rack, [rack.head])


@task(help={"inventory": INVENTORY_HELP, "json": "print JSON for scripts"})
@operator_task
def lock(c, inventory=None, json=False):
    """Show who holds the rack lock: operator, task, since, heartbeat.

    The lock lives on the head node. Exit 0 when free, 3 when held. Never waits for the
    lock."""
    import time

    from sparkrack.oplock.lock import STALE_AFTER, call

    rack = inventory_from(inventory)
    with _head_fleet(rack) as fleet:
        reply = call(fleet, rack.head.name, "show")
    holder = reply.holder
    stale = holder is not None and holder.age > STALE_AFTER
    if json:
        console.print_json({"head": rack.head.name, "held": holder is not None, "stale": stale,
                            "holder": holder.as_dict() if holder else None})
    elif holder is None:
        print(f"the rack lock on {rack.head.name} is free")
    else:
        note = (f" - STALE (no heartbeat for more than {STALE_AFTER} s): the next task takes it "
                "over" if stale else "")
        print(f"the rack lock on {rack.head.name} is held by {holder.describe(time.time())}{note}")
    if holder is not None:
        raise Exit(code=3)


@task(help={"force": "REASON: break the lock whoever holds it (required; logged)",
            "inventory": INVENTORY_HELP})
@operator_task
def unlock(c, force=None, inventory=None):
    """Break the rack lock: `invoke unlock --force REASON`.

    The reason goes to the audit log. A live holder notices at its next heartbeat and stops
    its task."""
    import time

    from sparkrack.oplock import audit
    from sparkrack.oplock.lock import call

    if not force or not str(force).strip():
        raise UsageError("unlock breaks another operator's lock: it needs a reason",
                         fix="`invoke unlock --force 'REASON'`")
    rack = inventory_from(inventory)
    record = audit.new_record(rack, "unlock", {"force": force})
    with _head_fleet(rack) as fleet:
        shown = call(fleet, rack.head.name, "show")
        if shown.holder is None:
            print(f"the rack lock on {rack.head.name} is free: nothing to break")
            return
        old = shown.holder
        record.note(lock={"id": old.token, "operator": old.operator, "pid": old.pid,
                          "command": old.command, "held_for_s": old.held_for})
        record.overrides.append(f"unlock --force: {force}")
        line = audit._line({**record.start, **record.end("ok")})
        reply = call(fleet, rack.head.name, "break", old.token, lines=[line])
    if reply.status == "MISMATCH":
        raise UsageError("the lock changed hands while breaking it; nothing was broken",
                         fix="run `invoke lock`, then unlock again if still needed")
    audit.append_local(line)
    print(f"broke the rack lock of {old.describe(time.time())}; reason logged: {force}")


@task(name="log", help={
    "since": SINCE_HELP,
    "task": "only this task (up, provision, ...)", "json": "print JSON for scripts",
    "local": "read this machine's copy instead of the head's",
    "verify": "check the log's hash chain instead of showing it: name the first line that "
              "was edited, inserted or removed (exit 1); lines written before the chain "
              "existed are counted, not verified",
    "inventory": INVENTORY_HELP})
@operator_task
def log_(c, since=None, task=None, json=False, local=False, verify=False, inventory=None):
    """The audit log: every changing task, who ran it and how it ended.

    Its arguments, its outcome and what changed. Read from the head node (this machine's
    copy with --local, or when the head does not answer). One row per task: start and end
    records paired. --verify checks that each line carries the hash of the line before it
    (exit 1 at the first that does not)."""
    from sparkrack.oplock import audit
    from sparkrack.oplock.lock import LockError, call

    cutoff = parse_since(since) if since else None
    rack = inventory_from(inventory)
    running, source = [], "local"
    text = ""
    if not local:
        try:
            with _head_fleet(rack) as fleet:
                reply = call(fleet, rack.head.name, "log")
            text, source = reply.audit, rack.head.name
            running = [reply.holder.token] if reply.holder else []
        except LockError as error:
            console.say(f"log: the head did not answer ({error.message}); reading this "
                        f"machine's copy {audit.local_path()}")
    if source == "local":
        path = audit.local_path()
        text = path.read_text() if path.exists() else ""
    if verify:
        checked = audit.verify_chain(text)
        if json:
            console.print_json({"source": source, "ok": checked.ok, "lines": checked.lines,
                                "unchained": checked.unchained, "broken_line": checked.broken,
                                "why": checked.why})
        if not checked.ok:
            raise Exit(checked.describe(source), code=1)
        if not json:
            print(checked.describe(source))
        return
    records = audit.parse_lines(text)
    if source == "local":
        records = [r for r in records if r.get("rack") in (None, rack.vars.rack_name)
                   or r.get("phase") == "end"]
    entries = audit.select(audit.merge(records, running), since=cutoff, task=task)
    if json:
        console.print_json(entries)
        return
    console.print_table(
        f"audit log ({source})",
        ["started", "operator", "command", "outcome", "took", "changed", "error"],
        [[e.get("time"), e.get("operator"), e.get("command") or e.get("task"),
          e.get("outcome"), audit.duration_text(e.get("duration_s")),
          audit.changed_summary(e.get("changed")), ((e.get("error") or "").splitlines() or [""])[0][:120]]
         for e in entries])
