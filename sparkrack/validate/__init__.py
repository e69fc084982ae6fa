"""`invoke validate`: every file an operator writes checked offline, as `terraform validate`
or `ansible-inventory --list` do: the inventory (its `pdu:` section too), each engine's
profile file and every profile's launch specs, the model data, the rules, and a fleet file
when there is one. Nothing is contacted (docs/inventory.md#validating-offline).

- run.py: `validate(...) -> Validation` (each file checked, each problem at its line).
"""

from sparkrack.validate.run import Checked, Problem, Validation, validate

__all__ = ["Checked", "Problem", "Validation", "validate"]
