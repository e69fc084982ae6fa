"""How the fleet's router runs: `smg launch` with the fleet file's host, ports and policy,
and the systemd unit that keeps it running on its host (docs/fleet.md#the-router).

The argv is the same wherever the router runs: the unit's ExecStart on the router's host,
or a process of this machine in the rehearsal (`rehearsal.up --racks 2`).
"""

from __future__ import annotations

import shlex

from sparkrack.racks.fleetfile import RouterSpec

UNIT = "sparkrack-router.service"
INSTALL_DIR = "/opt/sparkrack-router"  # on the router's host: venv/, wheels/
# SMG's worker health checks: a head that fails this many in a row is out of rotation
# (SMG's default 3; at the fleet file's interval, a powered-off head is out in 2 intervals)
HEALTH_FAILURE_THRESHOLD = 2


def router_argv(spec: RouterSpec, smg: str = f"{INSTALL_DIR}/venv/bin/smg") -> list[str]:
    """`smg launch` for the fleet's router: the fleet file's address, ports and policy;
    workers are registered through its API, never on the command line; no tokenizer (it
    routes the engines' own OpenAI-compatible HTTP)."""
    return [smg, "launch", "--host", spec.host, "--port", str(spec.port),
            "--prometheus-host", spec.host, "--prometheus-port", str(spec.metrics_port),
            "--policy", spec.policy, "--disable-tokenizer-autoload",
            "--health-check-interval-secs", str(spec.health_check_interval_s),
            "--health-failure-threshold", str(HEALTH_FAILURE_THRESHOLD),
            "--log-level", "warn"]


def unit_text(spec: RouterSpec) -> str:
    """The systemd unit of the router on its host."""
    return "\n".join([
        "[Unit]",
        f"Description=sparkrack fleet router (SMG {spec.version}) on {spec.host}:{spec.port}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        f"ExecStart={shlex.join(router_argv(spec))}",
        "Restart=always",
        "RestartSec=2",
        "# SMG waits up to its --shutdown-grace-period-secs for in-flight requests",
        "TimeoutStopSec=200",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])
