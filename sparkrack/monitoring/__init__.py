"""Monitoring a rack from its inventory (`invoke monitoring.render`): what Prometheus scrapes
(targets.py: one kind of target per job), and the files Prometheus and Grafana read, made
from the inventory and the shipped rules and dashboard (render.py). Pure: nothing is
contacted (docs/watchdog.md#monitoring-from-the-inventory).
"""

from sparkrack.monitoring.render import RenderOptions, Written, render, write_files
from sparkrack.monitoring.targets import KINDS, TargetGroup, TargetKind

__all__ = ["KINDS", "RenderOptions", "TargetGroup", "TargetKind", "Written", "render",
           "write_files"]
