#!/usr/bin/env python3
"""An engine upgrade on the rehearsal rack: what checking a lane against its image's own
option table costs, and the outage it saves, against a roll checked with the old table.

- learn: `engines.learn` of the stub SGLang 0.5.23 image on the head (a container of the
  image runs the extractor), median of --runs; the peer: the same extractor over the same
  sources on this machine, no container. Target: under 5 s per image.
- refusal: `check` of the 0.5.23 lane whose profile still passes the option 0.5.23 removed,
  against the learned table: refused in milliseconds, nothing stopped. The peer: the same
  roll when the lane is checked against the 0.5.22 table (the only one before per-version
  tables): the check passes, the roll stops the serving lane, every new rank exits at its
  argument parser and the roll falls back. Its wall time is the outage the table avoids.
Needs root, `invoke rehearsal.up` and `invoke provision -i inventory/rehearsal`.

    python benchmarks/upgrade.py [--runs 5]
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from sparkrack.core.errors import SparkrackError  # noqa: E402
from sparkrack.engines.option_names import LEARNED_DIR  # noqa: E402
from sparkrack.fleet import Fleet  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402
from sparkrack.learn.options import extractor_argv, extractor_files, learn  # noqa: E402
from sparkrack.lifecycle import lanes  # noqa: E402
from sparkrack.provision import provision  # noqa: E402
from sparkrack.rehearsal.stub.modeldir import write_stub_model  # noqa: E402
from sparkrack.rehearsal.stubimage import build_stub_images  # noqa: E402
from sparkrack.rehearsal.stubversions import VERSIONS, write_parser_sources  # noqa: E402
from sparkrack.rules import check_profile  # noqa: E402
from sparkrack.safety import gateburn  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NEW = "lmsysorg/sglang:v0.5.23-cu130"
STUB = {"load_delay_s": 0.5, "tokens_per_s": 50}


gateburn.SETTINGS = gateburn.BurnSettings(gate_seconds=1)  # the gates burn 1 s here


def upgraded(work: Path):
    """A copy of the rehearsal inventory on the 0.5.23 stub image, provisioned."""
    shutil.copytree(REPO / "inventory" / "rehearsal", work / "rack")
    all_vars = work / "rack" / "group_vars" / "all.yml"
    data = yaml.safe_load(all_vars.read_text())
    data["images"]["sglang"] = NEW
    data["rehearsal_image_sources"] = {"sglang": str(work / "new.tar"),
                                       "vllm": "/var/lib/sparkrack/rehearsal/images/vllm.tar"}
    all_vars.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = load_inventory(work / "rack")
    build_stub_images(inventory, engines=["sglang"])
    if provision(inventory, roles=["engine_images"]).exit_code:
        raise SystemExit("provisioning the 0.5.23 stub image failed")
    return inventory


def local_extraction(work: Path) -> float:
    """Seconds for the extractor over the 0.5.23 stub's sources on this machine."""
    site = work / "site"
    write_parser_sources(VERSIONS[("sglang", "0.5.23")], site)
    for path, content in extractor_files(str(site)).items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(content)
    argv = extractor_argv(str(site), "--installed", "sglang", python=sys.executable)
    started = time.monotonic()
    subprocess.run([argv[0], "-I", *argv[1:]], check=True, capture_output=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    with tempfile.TemporaryDirectory(prefix="bench-upgrade-") as tmp:
        work = Path(tmp)
        inventory = upgraded(work)
        learned = [learn(inventory, "sglang").seconds for _ in range(args.runs)]
        local = [local_extraction(work) for _ in range(args.runs)]
        print(f"learn from the image on the head: median {statistics.median(learned):.2f} s "
              f"(min {min(learned):.2f}, max {max(learned):.2f}, {args.runs} runs)")
        print(f"peer, the extractor on this machine: median {statistics.median(local):.2f} s; "
              f"the container costs x{statistics.median(learned) / statistics.median(local):.1f}")

        with Fleet(rehearsal) as fleet:
            write_stub_model(fleet, STUB)
        lanes.up(rehearsal, "sglang", "512k")
        try:
            started = time.monotonic()
            try:
                check_profile(inventory, "sglang", "512k")
                refused = "not refused"
            except SparkrackError as error:
                refused = error.line()
            checked = time.monotonic() - started
            print(f"check against the learned 0.5.23 table: {checked * 1000:.0f} ms, nothing "
                  f"stopped: {refused[:110]}")

            # The peer: the lane checked with the 0.5.22 table, as one table per engine did.
            table = inventory.path / LEARNED_DIR / "sglang-0.5.23.txt"
            old = (REPO / "sparkrack" / "engines" / "options" / "sglang-0.5.22.txt").read_text()
            table.write_text(old.replace("#: version 0.5.22", f"#: version 0.5.23\n#: image {NEW}"))
            started = time.monotonic()
            try:
                lanes.roll(inventory, "sglang", "512k")
                outcome = "rolled (unexpected)"
            except SparkrackError as error:
                outcome = error.line().splitlines()[0][:110]
            outage = time.monotonic() - started
            print(f"peer, checked with the 0.5.22 table: the roll ran {outage:.1f} s, the "
                  f"serving lane stopped and brought back: {outcome}")
            print(f"the refusal is x{outage / checked:.0f} sooner and stops nothing")
        finally:
            lanes.down(rehearsal)
            with Fleet(rehearsal) as fleet:
                for node in fleet.nodes:
                    fleet.docker_client(node).images.remove(NEW)


if __name__ == "__main__":
    main()
