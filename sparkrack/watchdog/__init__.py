"""The watchdog service: `python -m sparkrack.watchdog` guards what `up`/`roll` started,
from a rack node, and serves Prometheus metrics (see __main__, service, policy, metrics)."""
