"""Provisioning: Ansible-style roles (the top-level roles/) applied by plan, apply and re-plan.

    from sparkrack.provision import provision, unprovision
    report = provision(inventory, "spark-03", roles="clock_cap", check=True)
    report.exit_code, report.recap("spark-03"), report.node("spark-03").changes

Layers, each testable on its own:
- roles.py    role folders (defaults, tasks, handlers, templates) and their rendering per node
- modules/    one file per module (its parameters, facts, planning) and REGISTRY, the lookup
- gather.py   the one facts round trip per node (sparkrack/remote/gather.py, positional args) + parsers
- plan.py     pure planning: tasks + facts in, changes out (changes.py: Put / Run / Transfer;
              diffs.py: their diff output, secrets masked)
- apply.py    a node's changes over the fleet, few round trips
- images.py   the right image ID per ref (moved by sparkrack/transfer's pipelined chain)
- runner.py   gather -> plan -> apply -> re-plan, one NodeRun per node
- report.py   what the CLI prints
"""

from sparkrack.provision.roles import ROLES_DIR, load_roles, roles_path, site_roles
from sparkrack.provision.runner import NodeRun, ProvisionReport, provision


def unprovision(inventory, limit=None, **kwargs) -> ProvisionReport:
    """Remove what the roles write (files, units, drop-ins, images): provision(absent=True).

    Stops and disables the clock cap unit, which resets the GPU clocks: an uncapped rack
    can trip its power strip under load.
    """
    return provision(inventory, limit, absent=True, **kwargs)


__all__ = ["ROLES_DIR", "NodeRun", "ProvisionReport", "load_roles", "provision", "roles_path",
           "site_roles", "unprovision"]
