"""Provisioning: Ansible-style roles (the top-level roles/) applied by plan, apply and re-plan
(docs/provisioning.md; its layers: docs/provisioning.md#modules).

    from sparkrack.provision import provision, unprovision
    report = provision(inventory, "spark-03", roles="clock_cap", check=True)
    report.exit_code, report.recap("spark-03"), report.node("spark-03").changes
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
