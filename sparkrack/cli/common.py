"""What every task shares: operator errors as one line and an exit code, inventory choice.

The task modules import only this, errors and console at the top: anything heavier (docker,
paramiko, fabric, jinja2, rich, yaml and the modules using them) is imported inside the task
body that uses it, so `invoke --list` and `-h` stay fast (tests/unit/test_cli_imports.py)."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from invoke.exceptions import Exit

from ..errors import SparkrackError

if TYPE_CHECKING:
    from ..inventory import Inventory

INVENTORY_HELP = "inventory directory (default: $SPARKRACK_INVENTORY, else ./inventory)"


def operator_task(body):
    """Wrap a task body: a SparkrackError becomes `error: ...` and its exit code, no traceback;
    Ctrl-C becomes exit 130 after the body's own cleanup ran."""

    @functools.wraps(body)
    def run(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except SparkrackError as exc:
            raise Exit(f"error: {exc.line()}", code=exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None

    return run


def inventory_from(path: str | None) -> Inventory:
    """Load the inventory named by -i, $SPARKRACK_INVENTORY or ./inventory."""
    from ..inventory import load_inventory

    return load_inventory(path or os.environ.get("SPARKRACK_INVENTORY") or None)
