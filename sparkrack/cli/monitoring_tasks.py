"""Prometheus and Grafana files made from the inventory.

The `monitoring` collection: `monitoring.render` writes the scrape config (file_sd targets
made from the inventory), the alert rules, the dashboard and Grafana's provisioning of it;
it contacts nothing."""

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = "monitoring"


@task(help={"out": "the directory to write into (created if missing): prometheus/ and grafana/",
            "on": "the node the watchdog runs on (default: where watch.install recorded it, "
                  "else the head)",
            "prometheus_url": "where Grafana reaches Prometheus (default: "
                              "http://localhost:9090)",
            "dashboards_path": "the folder on Grafana's machine its dashboard provider reads "
                               "(default: /var/lib/grafana/dashboards/sparkrack)",
            "check": "write nothing: say which files would be new or changed, with the diff",
            "fleet": "a fleet file: its router's metrics are scraped too (job sparkrack-router)",
            "inventory": INVENTORY_HELP, "json": "print JSON for scripts"})
@operator_task
def render(c, out, on=None, prometheus_url=None, dashboards_path=None, check=False,
           inventory=None, json=False, fleet=None):
    """Write the rack's Prometheus and Grafana files, made from the inventory.

    prometheus/: prometheus.yml (one job per kind of target, each reading its file_sd file
    in targets/: the watchdog, rank 0's engine metrics), the alert rules. grafana/: the
    dashboard, this rack chosen, and the provisioning of its datasource and folder. Render
    again after the inventory changes; Prometheus rereads the target files by itself."""
    from pathlib import Path

    from sparkrack.monitoring import RenderOptions, write_files
    from sparkrack.monitoring import render as make

    defaults = RenderOptions()
    router, name = None, ""
    if fleet:
        from sparkrack.monitoring.targets import host_port
        from sparkrack.racks.fleetfile import load_fleet

        chosen = load_fleet(fleet)
        router, name = host_port(chosen.router.host, chosen.router.metrics_port), chosen.name
    options = RenderOptions(on, prometheus_url or defaults.prometheus_url,
                            dashboards_path or defaults.dashboards_path, router, name)
    written = write_files(make(inventory_from(inventory), options), Path(out), check=check)
    if json:
        console.print_json({"out": out, "check": bool(check),
                            "files": [{"path": w.path, "state": w.state} for w in written]})
        return
    for item in (w for w in written if w.state != "same"):
        if check and item.diff:
            print(item.diff, end="")
        console.say(f"{item.path}: {item.state}" + (" (--check: not written)" if check else ""))
    changed = sum(item.state != "same" for item in written)
    console.say(f"monitoring.render: {changed} of {len(written)} files "
                + ("would change" if check else "written") + f" in {out}")
