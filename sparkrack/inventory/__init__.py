"""Load and validate an Ansible-style inventory directory into typed, frozen nodes, vars
merged in Ansible's order, every mistake an InventoryError naming file:line and the fix;
spares apart from the TP group (docs/inventory.md).
"""

from sparkrack.inventory.loader import DEFAULT_INVENTORY, INVENTORY_ENV, load_inventory
from sparkrack.inventory.model import Inventory, Node
from sparkrack.inventory.yamlfile import MAX_FILE_BYTES, YamlMapping, read_yaml

__all__ = ["DEFAULT_INVENTORY", "INVENTORY_ENV", "MAX_FILE_BYTES", "Inventory", "Node",
           "YamlMapping", "load_inventory", "read_yaml"]
