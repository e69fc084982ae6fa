"""`invoke logs`: every rank's engine log, prefixed with rank and node, merged by time."""

import os
import sys

from invoke import task

from .. import console
from ..since import HELP as SINCE_HELP
from .common import INVENTORY_HELP, RAW_HELP, inventory_from, operator_task


@task(help={"rank": "only these ranks, e.g. 0 or 0,3 (default: every rank)",
            "nodes": "only the ranks on these nodes or groups, e.g. spark-01,spark-03",
            "follow": "keep streaming until Ctrl-C; a restarted rank is followed again",
            "since": SINCE_HELP,
            "tail": "the last N lines of each rank (default: all)",
            "timestamps": "show docker's timestamp on every line",
            "raw": RAW_HELP, "inventory": INVENTORY_HELP})
@operator_task
def logs(c, rank=None, nodes=None, follow=False, since=None, tail=None, inventory=None,
         timestamps=False, raw=False):
    """The running deployment's engine logs, every rank merged by time: `[rank R NODE] ...`.

    As `docker compose logs` / `kubectl logs`. Without a running deployment: what the last
    one's containers printed. A node that stops answering is named; the others go on.
    Exit 1 when some rank could not be read."""
    from ..lifecycle.loglines import COLORS, format_line
    from ..lifecycle.logs import show_logs

    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    def emit(line) -> None:
        print(format_line(line, timestamps=timestamps, raw=raw,
                          color=COLORS[line.rank % len(COLORS)] if color else None), flush=follow)

    problems = show_logs(inventory_from(inventory), ranks=rank, nodes=nodes, follow=follow,
                         since=since, tail=int(tail) if tail is not None else None, emit=emit,
                         on_event=console.say)
    if problems:
        from invoke.exceptions import Exit

        raise Exit("logs: not every rank could be read: " + "; ".join(problems), code=1)
