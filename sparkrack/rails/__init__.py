"""The fabric check: a full-size jumbo frame and a short burst between neighbours on every
cabled rail (rails.py: pairs and verdicts, pure; check.py: the run over the fleet)."""

from sparkrack.rails.check import FabricReport, check_fabric

__all__ = ["FabricReport", "check_fabric"]
