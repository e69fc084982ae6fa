"""What `up --json` / `roll --json` print: the deployment record with its phase times and
the URL rank 0 serves at (no rack: the start itself is a stand-in)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkrack.cli.serve_tasks import start_lane
from sparkrack.deployments.record import Deployment

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"


def test_the_record_with_its_phases_is_printed_as_json(capsys):
    asked = {}

    def start(rack, lane, **options):
        asked.update(engine=lane.engine, profile=lane.profile.name, options=sorted(options))
        return Deployment(engine=lane.engine, profile=lane.profile.name, deployment_id="d1",
                          spec_hash="s",
                          image="i", image_id="sha256:x", status="serving",
                          phases={"gates": 0.6, "burn": 6.8, "total": 9.8})

    start_lane(start, "up: {deployment} at {url}", "sglang", "512k", str(REHEARSAL), None,
               None, True)
    printed = json.loads(capsys.readouterr().out)
    assert printed["phases"] == {"gates": 0.6, "burn": 6.8, "total": 9.8}
    assert printed["url"] == "http://10.77.1.11:30000/v1" and printed["deployment_id"] == "d1"
    assert (asked["engine"], asked["profile"]) == ("sglang", "512k")
    assert asked["options"] == ["allow_degraded", "fabric_check", "on_event", "on_progress",
                                "override_power", "timeout"]  # no burn: safety owns it
