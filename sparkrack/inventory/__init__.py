"""Load and validate an Ansible-style inventory directory into typed, frozen nodes.

An inventory is a directory with `hosts.yml`, `group_vars/<group>.yml` and
`host_vars/<node>.yml`. Vars merge in Ansible's order (what `ansible-inventory --list`
shows): `all: vars:` in hosts.yml < the group's `vars:` there < group_vars/all.yml <
group_vars/<group>.yml < the host's own entry in hosts.yml < host_vars/<node>.yml. Every
mistake raises InventoryError naming file:line and the fix.

A host with `spare: true` (and no rank) is a staged node outside the TP group, written by
`invoke onboard` without --replace: it is in `Inventory.spares`, not in `nodes`, groups,
ranks or tp_size, so nothing that operates the rack touches it.

- schema.py: every var, its kind, default and where it may be set (RackVars);
- yamlfile.py: the bounded YAML reader with line numbers (profiles and roles use it too);
- loader.py: reading and checking the directory; model.py: Node and Inventory.
"""

from sparkrack.inventory.loader import DEFAULT_INVENTORY, INVENTORY_ENV, load_inventory
from sparkrack.inventory.model import Inventory, Node
from sparkrack.inventory.yamlfile import MAX_FILE_BYTES, YamlMapping, read_yaml

__all__ = ["DEFAULT_INVENTORY", "INVENTORY_ENV", "MAX_FILE_BYTES", "Inventory", "Node",
           "YamlMapping", "load_inventory", "read_yaml"]
