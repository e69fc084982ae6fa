"""The monitoring files, shipped in the wheel as the package `sparkrack.deploy`.

    prometheus/sparkrack-alerts.yml       the alert rules (and their promtool tests)
    grafana/sparkrack.json                the dashboard

This file only makes the folder a package (pyproject.toml maps it: package-dir), so that
sparkrack.data.shipped("deploy") finds it with importlib.resources in a checkout installed
with `pip install -e .` as in an installed wheel. `invoke monitoring.render` writes them
out with a scrape config made from the inventory (docs/watchdog.md#monitoring-from-the-inventory).
"""
