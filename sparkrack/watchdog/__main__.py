"""`python -m sparkrack.watchdog --inventory DIR [--listen ADDR:PORT]`: the watchdog service.

Runs until SIGTERM (systemd's stop) or Ctrl-C: one step a second (service.Watchdog), the
Prometheus metrics on http://ADDR:PORT/metrics, one log line per verdict change on stdout
(the journal, under systemd). Exit 2 on a bad inventory or listen address.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

DEFAULT_STATE = "/var/lib/sparkrack/watchdog/state.json"


def parse_listen(text: str | None, default_port: int) -> tuple[str, int]:
    """ADDR:PORT, :PORT or ADDR ([v6]:PORT for IPv6) -> (address, port); default: every
    address on the inventory's watchdog_metrics_port. ValueError when it is not that."""
    if not text:
        return "0.0.0.0", default_port
    if text.startswith("["):
        address, _, port = text[1:].partition("]")
        port = port.removeprefix(":")
    elif text.count(":") == 1:
        address, port = text.split(":")
    else:
        address, port = text, ""
    port_number = int(port) if port else default_port
    if not 0 < port_number < 65536:
        raise ValueError(f"port {port_number} out of range")
    return address or "0.0.0.0", port_number


def configure_logging(stream) -> None:
    """The journal gets the service's own lines at INFO. paramiko's are left out: it logs a
    node that takes TCP but never sends its SSH banner (a wedged host) as an ERROR with a
    traceback at every poll, and the service says what that node is in one line of its own
    (watchdog/silence.py)."""
    logging.basicConfig(level=logging.INFO, stream=stream, format="%(levelname)s %(message)s")
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkrack.watchdog",
                                     description="Guard the rack's TP group; serve metrics.")
    parser.add_argument("--inventory", "-i", default=os.environ.get("SPARKRACK_INVENTORY"),
                        help="inventory directory (default: $SPARKRACK_INVENTORY)")
    parser.add_argument("--listen", help="metrics address ADDR:PORT (default: "
                        "0.0.0.0:<watchdog_metrics_port>)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    parser.add_argument("--state", default=DEFAULT_STATE,
                        help=f"state file: restart budget, verdicts (default {DEFAULT_STATE})")
    parser.add_argument("--allow-power-cycle", action="store_true",
                        help="a node whose GPU latched while its group was busy may have its "
                        "power cycled through the rack's PDU (watchdog/cycling.py)")
    parser.add_argument("--node", help="the inventory's name of the node this service runs "
                        "on (watch.install gives it): a power cycle of this node is finished "
                        "by the service started again after the boot")
    parser.add_argument("--check-reach", action="store_true",
                        help="load everything the service runs, run `true` on every node "
                        "with the inventory's key, print one JSON line and exit (0: every "
                        "node answered); watch.install runs it on the node")
    args = parser.parse_args(argv)
    if args.check_reach:
        return check_reach(args.inventory)
    configure_logging(sys.stdout)
    log = logging.getLogger("sparkrack.watchdog")

    from prometheus_client import start_http_server

    from sparkrack.core.errors import SparkrackError
    from sparkrack.fleet import Fleet
    from sparkrack.inventory import load_inventory
    from sparkrack.watchdog.fleetrack import FleetRack
    from sparkrack.watchdog.metrics import WatchdogMetrics
    from sparkrack.watchdog.service import Watchdog

    try:
        inventory = load_inventory(args.inventory)
        address, port = parse_listen(args.listen, inventory.vars.watchdog_metrics_port)
        if args.node is not None:
            inventory.node(args.node)  # a name the inventory does not know: exit 2
    except (SparkrackError, ValueError) as error:
        log.error("%s", error)
        return 2
    metrics = WatchdogMetrics()
    server, _ = start_http_server(port, address, registry=metrics.registry)
    log.info("metrics on http://%s:%d/metrics; watching rack %s (%d nodes, head %s)", address,
             server.server_port, inventory.vars.rack_name, len(inventory.nodes),
             inventory.head.name)
    stop = threading.Event()

    def on_signal(number, frame) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with Fleet(inventory) as fleet:
        watchdog = Watchdog(inventory, FleetRack(inventory, fleet), metrics,
                            state_file=Path(args.state),
                            allow_power_cycle=args.allow_power_cycle, node=args.node)
        watchdog.run_forever(args.interval, sleep=stop.wait, should_stop=stop.is_set)
    server.shutdown()
    log.info("stopped")
    return 0


def check_reach(inventory_dir: str | None) -> int:
    """`--check-reach`: what the service imports, and one command on every node through the
    fleet (netguard, the inventory's key, its pinned known_hosts). One JSON line:
    {"ok": [nodes], "failed": {node: why}}; exit 0 only when every node answered."""
    import json

    import docker  # noqa: F401  (the service's docker clients; fails here if not shipped)
    import prometheus_client  # noqa: F401

    from sparkrack.core.errors import SparkrackError
    from sparkrack.fleet import Fleet
    from sparkrack.inventory import load_inventory
    from sparkrack.watchdog import fleetrack, service  # noqa: F401

    try:
        inventory = load_inventory(inventory_dir)
        with Fleet(inventory) as fleet:
            result = fleet.run(["true"], timeout=inventory.vars.ssh_connect_timeout + 10)
    except SparkrackError as error:
        print(json.dumps({"ok": [], "failed": {"inventory": error.line()}}))
        return 1
    print(json.dumps({"ok": [r.node for r in result.ok],
                      "failed": {r.node: r.error or r.status for r in result if not r.ok}}))
    return 0 if result.all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
