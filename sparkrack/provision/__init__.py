"""Provisioning: Ansible-style roles (roles/) applied by plan, apply and re-plan.

    from sparkrack.provision import provision, unprovision
    report = provision(inventory, "spark-03", roles="clock_cap", check=True)
    report.exit_code, report.recap("spark-03"), report.node("spark-03").changes

Layers, each testable on its own:
- roles.py   role folders (defaults, tasks, handlers, templates) and their rendering per node
- gather.py  the one facts round trip per node (a constant script, positional args) + parsers
- plan.py    pure planning: tasks + facts in, changes (Put / Run / Transfer) out
- apply.py   a node's changes over the fleet, few round trips
- images.py  the right image ID per ref (moved by sparkrack/transfer's pipelined chain)
- runner.py  gather -> plan -> apply -> re-plan, one NodeRun per node
- report.py  what the CLI prints
"""

from sparkrack.provision.roles import ROLES_DIR, load_roles, site_roles
from sparkrack.provision.runner import NodeRun, ProvisionReport, provision


def unprovision(inventory, limit=None, **kwargs) -> ProvisionReport:
    """Remove what the roles write (files, units, drop-ins, images): provision(absent=True).

    Stops and disables the clock cap unit, which resets the GPU clocks: an uncapped rack
    can trip its power strip under load.
    """
    return provision(inventory, limit, absent=True, **kwargs)


__all__ = ["ROLES_DIR", "NodeRun", "ProvisionReport", "load_roles", "provision", "site_roles",
           "unprovision"]
