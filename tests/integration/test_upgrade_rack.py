"""A rehearsed engine upgrade (issue 29): SGLang 0.5.22 serves; the inventory moves to the
rehearsal's stub of 0.5.23 (one option removed, one renamed). `check` and `roll` refuse it
until the version's options are learned from the image (`engines.learn`) and the profile no
longer passes the removed option; nothing running is stopped by a refusal. With the
profile fixed, a fault in the new version makes the roll fall back to the 0.5.22 image
that served; without it the roll goes through and 0.5.23 serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker.errors
import pytest
import yaml
from provision_helpers import inventory_copy
from stubgroup import nothing_runs

from sparkrack.data import shipped
from sparkrack.deployments.headapi import Endpoint
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes
from sparkrack.provision import provision
from sparkrack.rehearsal.stub.modeldir import write_stub_model
from sparkrack.rehearsal.stubimage import build_stub_images

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
NEW = "lmsysorg/sglang:v0.5.23-cu130"
MISLABELED = "lmsysorg/sglang:v0.5.22-mislabeled"  # the 0.5.23 image under a 0.5.22 tag
REMOVED = "--cuda-graph-max-bs-decode"
STUB = {"load_delay_s": 0.3, "tokens_per_s": 50}


def invoke(inventory, *args: str) -> subprocess.CompletedProcess:
    """`invoke ARGS -i INVENTORY` as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "invoke", *args, "-i", str(inventory.path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SPARKRACK_SANDBOX": "1"})


def serving(inventory) -> tuple[str, str]:
    """(image ID of rank 0's container, the version rank 0 reports)."""
    head = nothing_runs(inventory)[0]
    with Fleet(inventory, [inventory.head]) as fleet:
        image_id = fleet.docker_client(inventory.head).containers.get(head.name).image.id
    info = Endpoint(inventory.head, 30000).get_json("/get_server_info")
    return image_id, info["version"]


@pytest.fixture
def upgrade(engine_rack, tmp_path):
    """The rehearsal inventory copied with images.sglang on the 0.5.23 stub (its tar built
    beside it and provisioned); 0.5.22 serving from the rehearsal inventory. Afterwards:
    nothing runs, the stub model is the usual one, the 0.5.23 image is gone from the nodes."""
    sources = dict(engine_rack.vars.rehearsal_image_sources)
    images = dict(engine_rack.vars.images)
    inventory = inventory_copy(engine_rack.path, tmp_path / "rack",
                               images={**images, "sglang": NEW},
                               rehearsal_image_sources={**sources,
                                                        "sglang": str(tmp_path / "new.tar")})
    new_id = build_stub_images(inventory, engines=["sglang"])["sglang"][1]
    report = provision(inventory, roles=["engine_images"])
    assert report.exit_code == 0, [report.recap(n.name) for n in inventory.nodes]
    lanes.up(engine_rack, "sglang", "512k")
    try:
        yield inventory, new_id
    finally:
        lanes.down(engine_rack)
        with Fleet(engine_rack) as fleet:
            write_stub_model(fleet, STUB)
            for node in fleet.nodes:
                for ref in (MISLABELED, NEW):
                    try:
                        fleet.docker_client(node).images.remove(ref)
                    except docker.errors.ImageNotFound:
                        pass


def test_an_upgrade_is_refused_learned_fixed_fallen_back_and_rolled(upgrade, engine_rack):
    inventory, new_id = upgrade
    old_id, version = serving(engine_rack)
    assert version == "0.5.22" and old_id != new_id
    running = {(c.node, c.deployment, c.status) for c in nothing_runs(engine_rack)}

    # 1. The image's version has no option table: refused, naming how to add one.
    done = invoke(inventory, "check", "--engine", "sglang")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"{NEW} runs sglang 0.5.23, which has no option table (known: 0.5.22): run "
            f"`invoke engines.learn --engine sglang --image {NEW}`") in done.stdout, done.stdout

    # 1b. The same image under a 0.5.22 tag: its tag would check it as 0.5.22, its own
    #     version label says 0.5.23; the roll's image gate refuses it, nothing stops.
    with Fleet(inventory) as fleet:
        for node in fleet.nodes:
            fleet.docker_client(node).images.get(NEW).tag(MISLABELED)
    mislabeled = inventory_copy(engine_rack.path, inventory.path.parent / "mislabeled",
                                images={**engine_rack.vars.images, "sglang": MISLABELED})
    done = invoke(mislabeled, "roll", "--engine", "sglang")
    assert done.returncode != 0, done.stdout + done.stderr
    assert (f"{MISLABELED} on spark-01 says it runs sglang 0.5.23 (label "
            "org.opencontainers.image.version), its tag 0.5.22: run `invoke engines.learn "
            "--engine sglang`") in done.stderr, done.stderr
    assert {(c.node, c.deployment, c.status) for c in nothing_runs(engine_rack)} == running

    # 2. Learned from the image on the head: the removed and the renamed option named.
    done = invoke(inventory, "engines.learn", "--engine", "sglang")
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stderr  # what the task says goes to stderr; stdout is for --json
    assert f"{NEW} ({new_id[:19]}) on spark-01 runs sglang 0.5.23:" in said, said
    assert "compared with sglang 0.5.22:\n" in said
    assert f"  removed  {REMOVED}\n" in said
    assert ("  renamed  --schedule-conservativeness -> --schedule-conservative-factor "
            "(likely") in said
    table = inventory.path / ".sparkrack" / "engines" / "options" / "sglang-0.5.23.txt"
    header = [line for line in table.read_text().splitlines() if line.startswith("#: ")]
    assert f"#: image {NEW}" in header and f"#: image_id {new_id}" in header

    # 3. The shipped profile still passes the removed option: check and roll refuse it,
    #    and the roll stops nothing.
    done = invoke(inventory, "check", "--engine", "sglang")
    assert done.returncode == 2, done.stdout + done.stderr
    dropped = (f"sglang 0.5.23 has no option {REMOVED}: sglang 0.5.22 had it, 0.5.23 removed "
               f"it (drop {REMOVED} from the profile)")
    line = 1 + next(n for n, text in enumerate(
        (shipped("engines") / "sglang.yml").read_text().splitlines()) if REMOVED in text)
    assert f"sglang.yml:{line}: {dropped}" in done.stderr, done.stderr
    done = invoke(inventory, "roll", "--engine", "sglang")
    assert done.returncode == 2 and dropped in done.stderr, done.stderr
    assert {(c.node, c.deployment, c.status) for c in nothing_runs(engine_rack)} == running

    # 4. The profile fixed in the inventory: check passes, naming the version it checked.
    engines = inventory.path / ".sparkrack" / "engines"
    profile = yaml.safe_load((shipped("engines") / "sglang.yml").read_text())
    for lane in profile["profiles"].values():
        lane.get("flags", {}).pop(REMOVED, None)
    (engines / "sglang.yml").write_text(yaml.safe_dump(profile, sort_keys=False))
    done = invoke(inventory, "check", "--engine", "sglang", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["engine_version"] == "0.5.23" and not report["blocking"]
    assert report["checked_against"].startswith(f"the sglang 0.5.23 option table ({table}")
    assert "SM121-AUTOTUNE" in report["unverified_rules"]

    # 5. A fault in the new version: the roll falls back to the image that served.
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, {**STUB, "engines": {"sglang": {"versions": {
            "0.5.23": {"ranks": {"3": {"exit_at_start": True}}}}}}})
    done = invoke(inventory, "roll", "--engine", "sglang")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "rank 3 on spark-04 exited (exit code 1)" in done.stderr
    assert "rolled back to the last known-good deployment: sglang 512k (" + old_id[:19] \
        in done.stderr, done.stderr
    assert serving(engine_rack) == (old_id, "0.5.22")
    # the roll's gates and the restore's: no node burned again (each was verified this boot)
    assert done.stderr.count("verified this boot, not burned again") == 2, done.stderr

    # 6. Without the fault the roll goes through: 0.5.23 serves.
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, STUB)
    done = invoke(inventory, "roll", "--engine", "sglang")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"rolled to sglang 512k ({new_id[:19]}" in done.stderr, done.stderr
    assert serving(engine_rack) == (new_id, "0.5.23")
    done = invoke(inventory, "status")
    assert f"current (serving): sglang 512k image {NEW} ({new_id[:19]}) spec " in done.stdout


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_learning_the_pinned_images_gives_the_shipped_tables(engine_rack, tmp_path, engine):
    """The image's own Python reads the options its package defines: for the pinned
    versions, exactly the rows of the tables sparkrack ships (read from the real wheels)."""
    inventory = inventory_copy(engine_rack.path, tmp_path / "rack")
    done = invoke(inventory, "engines.learn", "--engine", engine, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    learned = json.loads(done.stdout)
    version = {"sglang": "0.5.22", "vllm": "0.33.0"}[engine]
    assert learned["version"] == version and learned["node"] == "spark-01"
    assert learned["comparison"] == {"compared_with": f"{engine} {version}", "added": [],
                                     "removed": [], "renamed": [], "changed": []}
    shipped_rows = (REPO / "sparkrack" / "engines" / "options" / f"{engine}-{version}.txt")
    rows = [line for line in Path(learned["file"]).read_text().splitlines()
            if not line.startswith("#")]
    assert rows == [line for line in shipped_rows.read_text().splitlines()
                    if not line.startswith("#")]
    with Fleet(inventory, [inventory.head]) as fleet:  # the container went with the run
        left = fleet.docker_client(inventory.head).containers.list(
            all=True, filters={"label": "sparkrack.learn"})
    assert left == []
