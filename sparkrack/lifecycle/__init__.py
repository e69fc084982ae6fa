"""The engine lifecycle on the rack: gates, ordered start with readiness, ordered stop with
memory recovery, the rank watchdog, and rolls with fallback to the last good deployment."""
