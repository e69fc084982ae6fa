"""`invoke run`: one ad-hoc command on every node, output grouped by identical result."""

import sys

from invoke import task

from .. import console
from .common import INVENTORY_HELP, RAW_HELP, inventory_from, operator_task


@task(name="run", help={
    "nodes": "only these nodes or groups, e.g. spark-01,spark-03 (default: every node)",
    "shell": "one shell line instead of an argv, run as `sh -c LINE`, e.g. 'dmesg | tail -3'",
    "json": "print JSON for scripts (every node's exit code, output and the groups)",
    "timeout": "seconds the command may run on a node (default: ssh_command_timeout)",
    "raw": RAW_HELP, "inventory": INVENTORY_HELP})
@operator_task
def run_command(c, nodes=None, shell=None, json=False, timeout=None, inventory=None, raw=False):
    """Run one command on every node: `invoke run [--nodes ...] -- CMD ARGS...`.

    The words after `--` are the argv (or --shell 'pipeline'); nodes that printed the same
    are shown once, as `dshbak -c` does, with the exit code. Exit 1 when any node failed
    or did not answer. Read-only by convention: changes belong to provision, up, down."""
    from ..adhoc import as_json, command_argv, group_results, remainder_of, render, run_adhoc
    from ..fleet import Fleet
    from ..oplock import audit

    rack = inventory_from(inventory)
    argv = command_argv(remainder_of(sys.argv), shell)
    record = audit.new_record(rack, "run", {"nodes": nodes, "argv": " ".join(map(str, argv))})
    result = run_adhoc(rack, argv, nodes, float(timeout) if timeout else None)
    record.note(nodes=[r.node for r in result])
    with Fleet(rack, [rack.head]) as fleet:  # read-only by convention, logged all the same
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
