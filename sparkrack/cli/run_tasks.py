"""`invoke run`: one ad-hoc command on every node, output grouped by identical result."""

import sys

from sparkrack.cli.common import INVENTORY_HELP, RAW_HELP, inventory_from, operator_task
from sparkrack.cli.flags import LIMIT_HELP, RENAMED_LIMIT, task
from sparkrack.core import console

COLLECTION = None


@task(name="run", renamed=RENAMED_LIMIT, help={
    "limit": LIMIT_HELP,
    "shell": "one shell line instead of an argv, run as `sh -c LINE`, e.g. 'dmesg | tail -3'",
    "json": "print JSON for scripts (every node's exit code, output and the groups)",
    "timeout": "seconds the command may run on a node (default: ssh_command_timeout)",
    "force": "run even while another operator holds the rack lock (without it: refused, "
             "exit code 3); the override and the holder are recorded in the audit log",
    "raw": RAW_HELP, "inventory": INVENTORY_HELP})
@operator_task
def run_command(c, limit=None, shell=None, json=False, timeout=None, force=False,
                inventory=None, raw=False):
    """Run one command on every node: `invoke run -- CMD ARGS...`.

    `--limit ...` chooses the nodes.

    The words after `--` are the argv (or --shell 'pipeline'); nodes that printed the same
    are shown once, as `dshbak -c` does, with the exit code. Exit 1 when any node failed or
    did not answer. Read-only by convention: changes belong to provision, up, down. Refused
    (exit 3) while another operator holds the rack lock, unless --force."""
    from sparkrack.fleet import Fleet
    from sparkrack.fleet.adhoc import (
        as_json,
        command_argv,
        group_results,
        remainder_of,
        render,
        run_adhoc,
    )
    from sparkrack.oplock import audit

    rack = inventory_from(inventory)
    argv = command_argv(remainder_of(sys.argv), shell)
    record = audit.new_record(rack, "run", {"limit": limit, "argv": " ".join(map(str, argv)),
                                            "force": force})
    with Fleet(rack, [rack.head]) as fleet:  # read-only by convention, logged all the same
        _respect_lock(fleet, rack, record, force)
        result = run_adhoc(rack, argv, limit, float(timeout) if timeout else None)
        record.note(nodes=[r.node for r in result])
        for problem in audit.log_unlocked(fleet, record, "ok" if result.all_ok else "failed",
                                          exit_code=0 if result.all_ok else 1):
            console.say(problem)
    if json:
        console.print_json(as_json(argv, result))
    else:
        for line in render(group_results(result), raw=raw):
            print(line)
        console.say(result.summary())
    if not result.all_ok:
        from invoke.exceptions import Exit

        raise Exit(code=1)


def _respect_lock(fleet, rack, record, force: bool) -> None:
    """Refuse (LockHeld, exit 3, logged) while another operator holds the rack lock, unless
    force (then the override is recorded). A head that cannot be asked is said, not a
    refusal: `run` is how an operator looks at a rack in trouble."""
    import time

    from sparkrack.oplock import audit
    from sparkrack.oplock.lock import LockError, LockHeld, live_holder

    try:
        holder = live_holder(fleet, rack.head.name)
    except LockError as error:
        console.say(f"lock: cannot ask {rack.head.name} who holds the rack lock "
                    f"({error.message}); running anyway")
        return
    if holder is None:
        return
    who = holder.describe(time.time())
    if force:
        record.overrides.append(f"run --force: the rack lock was held by {who}")
        console.say(f"lock: held by {who}; running anyway (--force, recorded)")
        return
    refused = LockHeld(who, fix="wait until `invoke lock` shows it free, or run anyway with "
                                "--force, which the audit log records")
    for problem in audit.log_unlocked(fleet, record, "refused", error=refused.line(),
                                      exit_code=refused.exit_code):
        console.say(problem)
    raise refused
