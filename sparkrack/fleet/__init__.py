"""The only layer that talks to nodes: SSH sessions, commands, files, streams and docker
(each module: docs/internals.md#how-it-talks-to-nodes).

    from sparkrack.fleet import Fleet, sh
    with Fleet(inventory, inventory.select(limit)) as fleet:
        result = fleet.run(["uname", "-r"], timeout=10)
"""

from sparkrack.fleet.argv import Arg, Argv, Secret, quote_argv, redact_argv, sh
from sparkrack.fleet.group import Fleet
from sparkrack.fleet.results import FleetError, FleetResult, NodeResult
from sparkrack.fleet.sftp import Upload

__all__ = ["Arg", "Argv", "Fleet", "FleetError", "FleetResult", "NodeResult", "Secret",
           "Upload", "quote_argv", "redact_argv", "sh"]
