#!/usr/bin/env python3
"""Staging a model to seven nodes through the chain, against one copy over one link and
against seven parallel `scp`s from the source, in the same run.

The source is a directory on this machine (--gb GiB of incompressible synthetic weights in
--files files); the targets are spark-02..08 of the rehearsal rack (spark-01 is left alone).
In the same run:

1. `weights.stage` (sparkrack.transfer.weights.stage) to the 7 nodes onto empty
   directories: the stream leaves this machine once, every node writes and hashes while
   forwarding, the manifest is written last on each (the manifest is made at the source
   first, timed apart);
2. one copy over one link: the same stage to spark-02 alone, and `scp -r` to spark-02;
3. seven `scp -r` at once from this machine (one per node), then `sha256sum -c` on every
   node (staging verifies as it writes; scp does not);
4. the stage again with everything present (the nodes' hash cache: nothing read back);
5. over the fabric alone (roce_addr, node to node): from spark-02's copy, the chain to
   spark-03..08 against one direct copy to spark-03 (the goal on a real rack: the chain
   within 1.5x of one link).

On this machine every "node" shares the same CPUs, page cache and disk, and the "links"
are veths of one bridge: the figures compare what the methods cost this machine (bytes
sent by the source, copies, encryption, hashing), not a 200G fabric, where the source's
uplink carrying the data once is what counts.

    flock /tmp/rack.lock python benchmarks/weights.py [--gb 1] [--files 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.fleet import Fleet
from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal.layout import CLIENT_KEY
from sparkrack.remote import script
from sparkrack.transfer.manifest import MANIFEST_NAME
from sparkrack.transfer.weights import Source, stage

STAGE_DIR = "/models/sparkrack-bench-weights"
SCP_DIR = "/models/sparkrack-bench-scp"
FABRIC_DIR = "/models/sparkrack-bench-fabric"


def make_model(root: Path, files: int, size: int) -> None:
    root.mkdir(parents=True)
    for index in range(files):
        with open(root / f"model-{index + 1:05d}-of-{files:05d}.safetensors", "wb") as f:
            left = size
            while left:
                chunk = os.urandom(min(left, 4 << 20))  # incompressible, like NVFP4 weights
                f.write(chunk)
                left -= len(chunk)


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def scp(inventory, node, source: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["scp", "-q", "-r", "-i", str(CLIENT_KEY), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={inventory.known_hosts_path}",
         "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
         str(source), f"root@{node.address}:{SCP_DIR}"], capture_output=True, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=4)
    args = parser.parse_args()
    if not REHEARSAL_STATE_FILE.exists():
        raise SystemExit("the rehearsal rack is down: invoke rehearsal.up")
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    targets = list(inventory.nodes[1:])
    one = targets[:1]
    size = int(args.gb * 2**30 / args.files) // (1 << 20) * (1 << 20)
    total = size * args.files
    work = Path(tempfile.mkdtemp(prefix="sparkrack-bench-weights-"))
    os.environ.setdefault("SPARKRACK_STATE_DIR", str(work / "state"))
    source = work / "model"
    mib = total / 2**20

    def rate(seconds: float, copies: int = 1) -> str:
        return f"{mib * copies / seconds:.0f} MiB/s delivered"

    with Fleet(inventory, targets) as fleet:
        def clean(*dirs: str) -> None:
            fleet.run(["sh", "-c", 'rm -rf "$@" /var/lib/sparkrack/stage-verified.json', "sh",
                       *(dirs or (STAGE_DIR, SCP_DIR))], timeout=600).raise_for_failures()

        def staged(nodes, origin=None, into=STAGE_DIR):
            report = stage(fleet, origin or Source(str(source)), nodes, into)
            if not report.verified:
                raise SystemExit(f"stage failed: {report.errors}")
            return report

        try:
            make_model(source, args.files, size)
            figures = {}
            clean()
            fleet.run(["true"])  # warm connections, as a task has them after its lock
            figures["manifest"], _ = timed(lambda: subprocess.run(
                [sys.executable, "-c", script("stager"), "manifest", str(source),
                 str(work / "cache.json"), "1"], capture_output=True, check=True))
            print(f"{args.files} files, {total / 2**30:.2f} GiB on this machine; its manifest "
                  f"made (hashed) in {figures['manifest']:.2f} s")
            figures["chain7"], seven = timed(lambda: staged(targets))
            figures["rerun"], again = timed(lambda: staged(targets))
            assert again.bytes_sent == 0 and not again.copied
            on_node = Source(STAGE_DIR, targets[0])  # spark-02's copy: node to node only
            clean(FABRIC_DIR)
            figures["fabric6"], _ = timed(lambda: staged(targets[1:], on_node, FABRIC_DIR))
            clean(FABRIC_DIR)
            figures["fabric1"], _ = timed(lambda: staged(targets[1:2], on_node, FABRIC_DIR))
            clean(FABRIC_DIR)
            clean()
            figures["chain1"], _ = timed(lambda: staged(one))
            clean()
            figures["scp1"], done = timed(lambda: scp(inventory, one[0], source))
            if done.returncode:
                raise SystemExit(f"scp failed: {done.stderr.strip()[-300:]}")
            clean()
            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                figures["scp7"], runs = timed(lambda: list(pool.map(
                    lambda n: scp(inventory, n, source), targets)))
            if any(r.returncode for r in runs):
                raise SystemExit("scp failed: " + "; ".join(r.stderr[-200:] for r in runs))
            manifest = (source / MANIFEST_NAME).read_bytes()
            fleet.put({n.name: [(manifest, f"{SCP_DIR}/{MANIFEST_NAME}", 0o644)]
                       for n in targets}).raise_for_failures()
            figures["check7"], checked = timed(lambda: fleet.run(
                ["sh", "-c", f'cd "$0" && sha256sum -c --quiet {MANIFEST_NAME}', SCP_DIR],
                timeout=3600))
            checked.raise_for_failures()
        finally:
            clean(STAGE_DIR, SCP_DIR, FABRIC_DIR)
            shutil.rmtree(work, ignore_errors=True)
    sent7 = seven.bytes_sent / 2**20
    print(f"to {len(targets)} nodes ({', '.join(n.name for n in targets)}):")
    print(f"  weights.stage (chain)    {figures['chain7']:6.2f} s  ({rate(figures['chain7'], 7)}; "
          f"{sent7:.0f} MiB left the source: once; verified, manifest last)")
    plain = figures["scp7"] + figures["check7"]
    print(f"  7 parallel scp           {figures['scp7']:6.2f} s  ({rate(figures['scp7'], 7)}; "
          f"{7 * mib:.0f} MiB left the source: 7 times; not verified)")
    print(f"    + sha256sum -c on each {figures['check7']:6.2f} s  = {plain:.2f} s")
    print(f"  chain / 7 scp = {figures['chain7'] / figures['scp7']:.2f}; "
          f"chain / (7 scp + check) = {figures['chain7'] / plain:.2f}")
    print(f"one copy over one link (to {one[0].name}):")
    print(f"  weights.stage            {figures['chain1']:6.2f} s  ({rate(figures['chain1'])})")
    print(f"  scp                      {figures['scp1']:6.2f} s  ({rate(figures['scp1'])})")
    print(f"  chain to 7 / stage to 1 = {figures['chain7'] / figures['chain1']:.2f} "
          "(1.0 would be the pipelining's ideal)")
    hops = ", ".join(n.name for n in targets[1:])
    print(f"over the fabric (roce_addr), from {targets[0].name}'s copy:")
    print(f"  chain to {hops}  {figures['fabric6']:6.2f} s  ({rate(figures['fabric6'], 6)})")
    print(f"  one direct copy to {targets[1].name}  {figures['fabric1']:6.2f} s  "
          f"({rate(figures['fabric1'])})")
    print(f"  chain to 6 / one copy = {figures['fabric6'] / figures['fabric1']:.2f} "
          "(goal on a real rack: within 1.5)")
    print(f"everything present on the 7: stage again {figures['rerun']:.2f} s "
          f"(hash cache: {sum(n.hashed_bytes for n in again.nodes.values())} bytes read back)")


if __name__ == "__main__":
    main()
