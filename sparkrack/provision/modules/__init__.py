"""The provisioning modules, one file each, and `REGISTRY`: the one place a role task's
module name is looked up (roles.py checks a task's parameters against it, plan.py asks it
for the facts to gather and the planner to run).

Adding a module: write `<name>.py` here holding `MODULE = Module(...)` (base.py says what
it declares), then add it to REGISTRY below.
"""

from __future__ import annotations

from sparkrack.provision.modules import (
    assert_,
    authorized_key,
    command,
    copy,
    docker_image,
    file,
    systemd,
    template,
)
from sparkrack.provision.modules.base import Module

REGISTRY: dict[str, Module] = {module.name: module for module in (
    template.MODULE, file.MODULE, systemd.MODULE, command.MODULE, docker_image.MODULE,
    assert_.MODULE, authorized_key.MODULE, copy.MODULE)}

__all__ = ["REGISTRY", "Module"]
