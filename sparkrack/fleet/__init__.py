"""The only layer that talks to nodes: SSH sessions, commands, files, streams and docker.

    from sparkrack.fleet import Fleet, sh
    with Fleet(inventory, inventory.select(limit)) as fleet:
        result = fleet.run(["uname", "-r"], timeout=10)

- group.py        Fleet: the selected nodes, one warm connection each, one result per node
                  (commands, SFTP put/get, streams, docker clients)
- argv.py         argv lists quoted in one place; secrets shown as ***; chained scripts
- channel.py      one command on an SSH channel, bounded by a deadline
- sftp.py         put and get over SFTP: each write private, fsync-ed and renamed into place
- ssh.py          opening a connection: the netguard check, a fast TCP probe, host keys
                  from the inventory's known_hosts only, keepalives and a liveness probe
- hostkeys.py     a node's host key read before it is trusted (onboarding), fingerprints
- reach.py        does a node answer at all: a session, a refusal (host key, login,
                  connection) or silence (break-glass fails closed on it)
- warm.py         connections opened ahead of first use, and the rack lock's lent one
- dockerclient.py a docker SDK client over a connection made like the fleet's own
- results.py      NodeResult / FleetResult / FleetError
- netguard.py     which addresses may be contacted at all (loopback, the rehearsal subnet
                  while the rack is up; under the tests nothing else)

Nothing outside this package imports paramiko (tests/unit/test_fleet_boundary.py).
"""

from sparkrack.fleet.argv import Arg, Argv, Secret, quote_argv, redact_argv, sh
from sparkrack.fleet.group import Fleet
from sparkrack.fleet.results import FleetError, FleetResult, NodeResult
from sparkrack.fleet.sftp import Upload

__all__ = ["Arg", "Argv", "Fleet", "FleetError", "FleetResult", "NodeResult", "Secret",
           "Upload", "quote_argv", "redact_argv", "sh"]
