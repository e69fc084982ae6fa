"""The watchdog: the group watch and its stall detector (watch.py; `invoke watch` runs it
from here), and the service, `python -m sparkrack.watchdog`, that runs it on a rack node
and serves Prometheus metrics (docs/watchdog.md)."""
