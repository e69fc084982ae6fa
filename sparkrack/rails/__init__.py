"""The rail check (`invoke fabric.check`, `up --fabric-check`): a full-size jumbo frame and a
short burst between neighbours on every cabled rail (verdicts.py: pairs and verdicts, pure;
check.py: the run over the fleet; docs/provisioning.md#the-fabric-check)."""

from sparkrack.rails.check import FabricReport, check_fabric

__all__ = ["FabricReport", "check_fabric"]
