"""`invoke logs`: every rank's engine log, prefixed with rank and node, merged by time."""

import os
import sys

from sparkrack.cli.common import INVENTORY_HELP, RAW_HELP, inventory_from, operator_task
from sparkrack.cli.flags import RENAMED_LIMIT, task
from sparkrack.core import console
from sparkrack.core.since import HELP as SINCE_HELP

COLLECTION = None


@task(renamed=RENAMED_LIMIT, help={"rank": "only these ranks, e.g. 0 or 0,3 (default: every rank)",
            "limit": "only the ranks on these nodes or groups, e.g. spark-01,spark-03",
            "follow": "keep streaming until Ctrl-C; a restarted rank is followed again",
            "since": SINCE_HELP,
            "tail": "the last N lines of each rank (default: all)",
            "timestamps": "show docker's timestamp on every line",
            "raw": RAW_HELP, "inventory": INVENTORY_HELP,
            "failed": "the last failed start's failed rank: the lines it printed last, kept "
                      "in the head's failed record (its containers were removed)"})
@operator_task
def logs(c, rank=None, limit=None, follow=False, since=None, tail=None, inventory=None,
         timestamps=False, raw=False, failed=False):
    """The deployment's engine logs, every rank merged by time.

    Each line as `[rank R NODE] ...`, as `docker compose logs` / `kubectl logs` show them.
    Without a running deployment: what the last one's containers printed; --failed: the last
    failed start's failed rank, whose containers were removed. A node that stops answering
    is named; the others go on. Exit 1 when some rank could not be read."""
    from sparkrack.logs.lines import COLORS, format_line
    from sparkrack.logs.readers import show_logs

    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    def emit(line) -> None:
        print(format_line(line, timestamps=timestamps, raw=raw,
                          color=COLORS[line.rank % len(COLORS)] if color else None), flush=follow)

    if failed:
        from sparkrack.logs.readers import failed_start_lines

        if follow:
            from sparkrack.core.errors import UsageError

            raise UsageError("--failed shows a failed start's kept lines: nothing to follow",
                             fix="drop --follow")
        record, lines = failed_start_lines(inventory_from(inventory))
        console.say(f"{record.deployment_id} failed: the last lines of rank "
                    f"{record.log_tail['rank']} ({record.log_tail['node']}), kept in its record")
        for line in lines:
            emit(line)
        return
    problems = show_logs(inventory_from(inventory), ranks=rank, nodes=limit, follow=follow,
                         since=since, tail=int(tail) if tail is not None else None, emit=emit,
                         on_event=console.say)
    if problems:
        from invoke.exceptions import Exit

        raise Exit("logs: not every rank could be read: " + "; ".join(problems), code=1)
