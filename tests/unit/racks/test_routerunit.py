"""The router's argv and systemd unit, from the fleet file."""

from sparkrack.racks.fleetfile import RouterSpec
from sparkrack.racks.routerunit import router_argv, unit_text

SPEC = RouterSpec(host="10.77.1.254", port=30080, metrics_port=29000, policy="round_robin",
                  version="1.13.0", ssh_user="root", ssh_port=22, ssh_key=None,
                  known_hosts=None, health_check_interval_s=1)


def test_the_router_runs_smg_launch_with_the_fleet_files_values():
    argv = router_argv(SPEC, smg="/x/smg")
    assert argv[:2] == ["/x/smg", "launch"]
    pairs = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1])
             if flag.startswith("--") and not argv[i + 1].startswith("--")}
    assert pairs["--host"] == pairs["--prometheus-host"] == "10.77.1.254"
    assert (pairs["--port"], pairs["--prometheus-port"], pairs["--policy"]) == \
        ("30080", "29000", "round_robin")
    assert pairs["--health-check-interval-secs"] == "1"
    assert "--worker-urls" not in argv  # workers come through its API
    assert "--disable-tokenizer-autoload" in argv


def test_the_unit_restarts_the_router_and_runs_the_same_argv():
    text = unit_text(SPEC)
    assert "ExecStart=/opt/sparkrack-router/venv/bin/smg launch --host 10.77.1.254" in text
    assert "Restart=always" in text and "WantedBy=multi-user.target" in text
