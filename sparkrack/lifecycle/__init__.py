"""The engine lifecycle on the rack, `up`, `down` and `roll` (lanes.py): gates, ordered start
with readiness, ordered stop with memory recovery, rolls with fallback to the last good
deployment; restarts, power cycles and break-glass (docs/engines.md#gates)."""
