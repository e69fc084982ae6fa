"""What the nodes report: per node, or as the rack's shape.

The `facts` collection: `invoke facts` (its default task) prints every fact per node as
JSON; `facts.capture` records the rack's shape in one file, and what changed since one
(sparkrack/rehearsal/twin/)."""

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import LIMIT_HELP, task
from sparkrack.core import console

COLLECTION = "facts"


@task(default=True, help={"inventory": INVENTORY_HELP, "limit": LIMIT_HELP})
@operator_task
def facts(c, inventory=None, limit=None):
    """Every fact one round trip gathers per node, as JSON."""
    from sparkrack.status.rows import gather_status

    rows = gather_status(inventory_from(inventory), limit)
    console.print_json({r.node: (r.facts.as_dict() if r.facts else {"error": r.error}) for r in rows})


@task(help={"inventory": INVENTORY_HELP,
            "out": "write the capture to this file (default: print it)",
            "diff": "compare the rack now with this earlier capture: one line a change; "
                    "exit 1 when anything changed",
            "json": "print JSON for scripts"})
@operator_task
def capture(c, inventory=None, out=None, diff=None, json=False):
    """Record the rack's shape in one file, read-only.

    Per node its kernel, driver, CUDA, GPU, memory, docker, the clock-cap unit, each
    ConnectX-7 RDMA function's port, rate, MTU and GID layout. No address, host key, user or
    token is recorded."""
    from pathlib import Path

    from invoke.exceptions import Exit

    from sparkrack.core.terminal import escape_controls
    from sparkrack.rehearsal.twin.capture import capture as take
    from sparkrack.rehearsal.twin.capture import dump, read, write
    from sparkrack.rehearsal.twin.diff import differences

    earlier = read(Path(diff)) if diff else None
    document = take(inventory_from(inventory))
    down = [n["name"] for n in document["nodes"] if not n["reachable"]]
    if earlier is not None:
        changes = differences(earlier, document)
        if json:
            console.print_json({"since": earlier.get("captured"), "changes": changes})
        else:
            for line in changes or [f"no change since {earlier.get('captured')}"]:
                print(escape_controls(line))
    elif out:
        write(document, Path(out))
        console.say(f"facts.capture: {len(document['nodes'])} node(s) recorded in {out}"
                    + (f" ({', '.join(down)} did not answer)" if down else ""))
    elif json:
        console.print_json(document)
    else:
        print(dump(document), end="")
    if earlier is not None and changes:
        raise Exit(code=1)
