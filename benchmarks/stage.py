#!/usr/bin/env python3
"""Weight staging onto a new node from a peer, against plain `scp` of the same files.

Two extra rehearsal nodes are added for the run (spark-11 the peer, spark-12 the new node;
removed afterwards); spark-01..08 are not touched. The peer gets --gb GiB of synthetic
weights in --files files and their sha256sum manifest. Then, in the same run:

1. stage (sparkrack.transfer.weights.stage, as onboarding runs it: a one-hop chain from
   the peer) onto an empty directory: hash-while-receiving, rename when the SHA-256
   matches, manifest last;
2. `scp -3` of the same files (remote to remote through this machine: the nodes hold no
   keys to each other), then `sha256sum -c` on the new node, which staging includes;
3. stage again with everything present: with the node's hash cache (size, mtime, inode
   of a file it verified) and with --full-verify (every file hashed again);
4. resume: a stage interrupted at about half of the bytes (the receiver killed), then the
   re-run that sends only the rest.

On this machine every "node" shares the same 2 CPUs, page cache and disk: the figures
compare the methods' overheads (copies, encryption, hashing), not a 200G fabric.

    python benchmarks/stage.py [--gb 2] [--files 4] [--rounds 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.fleet import Fleet
from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE
from sparkrack.inventory import Inventory, Node, load_inventory
from sparkrack.rehearsal import nodefs, nodeproc
from sparkrack.rehearsal.layout import CLIENT_KEY
from sparkrack.rehearsal.rack import RehearsalRack
from sparkrack.transfer.manifest import MANIFEST_NAME
from sparkrack.transfer.weights import Source
from sparkrack.transfer.weights import stage as stage_weights

PEER, PEER_ADDR = "spark-11", "10.77.1.21"
NEW, NEW_ADDR = "spark-12", "10.77.1.22"
SRC_DIR = DST_DIR = "/models/bench"  # a node source: the same model_path on both nodes
SCP_DIR = "/models/bench-scp"

MAKE = r'''
import hashlib, os, sys
root, files, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(root, exist_ok=True)
lines = []
for i in range(files):
    name = "model-%05d-of-%05d.safetensors" % (i + 1, files)
    h = hashlib.sha256()
    with open(os.path.join(root, name), "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 4 << 20))  # incompressible, like quantized weights
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    lines.append("%s  %s\n" % (h.hexdigest(), name))
with open(os.path.join(root, "sparkrack-manifest.sha256"), "w") as f:
    f.writelines(lines)
'''


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def bench_inventory(work: Path) -> Inventory:
    """An inventory of the two extra nodes, trusting their keys (we made them)."""
    rack = load_inventory(REPO / "inventory" / "rehearsal")
    known = work / "known_hosts"
    lines = []
    for name, address in ((PEER, PEER_ADDR), (NEW, NEW_ADDR)):
        from sparkrack.rehearsal.layout import NodeLayout

        pub = nodefs.host_key(NodeLayout(name, address)).split()
        lines.append(f"{address} {pub[0]} {pub[1]}\n")
    known.write_text("".join(lines))
    rack_vars = dataclasses.replace(rack.vars, known_hosts_file=str(known))
    nodes = tuple(Node(name, address, 22, "root", CLIENT_KEY, rank, address, rack_vars)
                  for rank, (name, address) in enumerate(((PEER, PEER_ADDR), (NEW, NEW_ADDR))))
    return Inventory(work, nodes, rack_vars, {"bench": (PEER, NEW)})


def must(result, what):
    bad = [r for r in result if not r.ok]
    if bad:
        raise SystemExit(f"{what}: {bad[0].error}: {bad[0].stderr[-300:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if not REHEARSAL_STATE_FILE.exists():
        raise SystemExit("the rehearsal rack is down: invoke rehearsal.up")
    rack = RehearsalRack(load_inventory(REPO / "inventory" / "rehearsal"), say=lambda m: None)
    size = int(args.gb * 2**30 / args.files) // (1 << 20) * (1 << 20)
    total = size * args.files
    work = Path(tempfile.mkdtemp(prefix="sparkrack-bench-stage-"))
    try:
        for name, address in ((PEER, PEER_ADDR), (NEW, NEW_ADDR)):
            if name in rack.extras:
                rack.remove_node(name)
            rack.add_node(name, address)
        inventory = bench_inventory(work)
        peer, new = inventory.nodes
        with Fleet(inventory) as fleet:
            seconds, _ = timed(lambda: must(fleet.run(
                {PEER: ["python3", "-c", MAKE, SRC_DIR, str(args.files), str(size)]},
                timeout=3600), "synthetic weights"))
            manifest = fleet.run({PEER: ["cat", f"{SRC_DIR}/{MANIFEST_NAME}"]})[PEER].stdout
            print(f"{args.files} files, {total / 2**30:.2f} GiB of synthetic weights on {PEER} "
                  f"(written and hashed in {seconds:.1f} s)")

            def fresh(*dirs):
                must(fleet.run({NEW: ["sh", "-c", 'rm -rf "$@"; rm -f /var/lib/sparkrack/'
                                      'stage-verified.json', "sh", *dirs]}), "cleanup")

            def stage(full=False):
                report = stage_weights(fleet, Source(SRC_DIR, peer), [new], DST_DIR,
                                       manifest_text=manifest, full_verify=full, attempts=1)
                if report.errors or not report.verified:
                    raise SystemExit(f"stage failed: {report.errors}")
                return report

            def rate(seconds):
                return f"{total / 2**20 / seconds:.0f} MiB/s"

            figures = {}
            runs = []
            for _ in range(args.rounds):
                fresh(DST_DIR)
                runs.append(timed(stage)[0])
            figures["stage"] = statistics.median(runs)
            scp_runs, check_runs = [], []
            for _ in range(args.rounds):
                fresh(SCP_DIR)
                must(fleet.run({NEW: ["mkdir", "-p", SCP_DIR]}), "mkdir")
                names = [line.split(None, 1)[1].strip() for line in manifest.splitlines()]
                argv = ["scp", "-3", "-q", "-i", str(CLIENT_KEY), "-o", "BatchMode=yes",
                        "-o", f"UserKnownHostsFile={work / 'known_hosts'}",
                        "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
                        *[f"root@{PEER_ADDR}:{SRC_DIR}/{n}" for n in names],
                        f"root@{NEW_ADDR}:{SCP_DIR}/"]
                seconds, done = timed(lambda argv=argv: subprocess.run(argv, capture_output=True,
                                                             text=True))
                if done.returncode:
                    raise SystemExit(f"scp failed: {done.stderr.strip()[-300:]}")
                scp_runs.append(seconds)
                must(fleet.put({NEW: [(manifest.encode(), f"{SCP_DIR}/{MANIFEST_NAME}",
                                       0o644)]}), "manifest")
                seconds, _ = timed(lambda: must(fleet.run(
                    {NEW: ["sh", "-c", f"cd {SCP_DIR} && sha256sum -c --quiet {MANIFEST_NAME}"]},
                    timeout=3600), "sha256sum -c"))
                check_runs.append(seconds)
            figures["scp"] = statistics.median(scp_runs)
            figures["scp_check"] = statistics.median(check_runs)
            fresh(SCP_DIR)
            fresh(DST_DIR)
            stage()
            figures["rerun"], again = timed(stage)
            assert again.bytes_sent == 0 and not again.copied
            figures["rerun_full"], full = timed(lambda: stage(full=True))
            # resume: kill the receiver at about half, then run again
            fresh(DST_DIR)
            half = total // 2
            killer = threading.Thread(target=kill_receiver_at, args=(rack, NEW, DST_DIR, half))
            killer.start()
            interrupted = stage_weights(fleet, Source(SRC_DIR, peer), [new], DST_DIR,
                                        manifest_text=manifest, attempts=1)
            killer.join()
            figures["resume"], resumed = timed(stage)
        print(f"onto an empty directory on {NEW} (median of {args.rounds}):")
        print(f"  stage                {figures['stage']:.2f} s  ({rate(figures['stage'])}; "
              "verified: hashed while received, manifest written)")
        plain = figures["scp"] + figures["scp_check"]
        print(f"  scp -3               {figures['scp']:.2f} s  ({rate(figures['scp'])}; not "
              f"verified) + sha256sum -c {figures['scp_check']:.2f} s = {plain:.2f} s")
        best = figures["stage"]
        print(f"  stage / (scp + check) = {best / plain:.2f}; stage / scp alone = "
              f"{best / figures['scp']:.2f}")
        print("everything present:")
        print(f"  stage re-run         {figures['rerun']:.2f} s  (hash cache: nothing read "
              f"back, {again.nodes[NEW].hashed_bytes / 2**20:.0f} MiB hashed)")
        print(f"  stage --full-verify  {figures['rerun_full']:.2f} s  (every file hashed "
              f"again: {full.nodes[NEW].hashed_bytes / 2**30:.2f} GiB)")
        print("interrupted at ~half, then run again:")
        print(f"  first run            {'failed as intended' if interrupted.errors else 'NOT interrupted'}"
              f" ({interrupted.errors[:1]})")
        print(f"  re-run               {figures['resume']:.2f} s  (sent "
              f"{resumed.bytes_sent / 2**20:.0f} of {total / 2**20:.0f} MiB; resumed "
              f"{len(resumed.resumed)} file(s))")
    finally:
        for name in (PEER, NEW):
            if name in rack.extras:
                rack.remove_node(name)


def kill_receiver_at(rack: RehearsalRack, name: str, root: str, at: int) -> None:
    """Kill the relay writing on the node once the files under root hold `at` bytes."""
    finder = r'''
import glob, os, signal, sys
root, at = sys.argv[1], int(sys.argv[2])
have = sum(os.path.getsize(p) for p in glob.glob(root + "/**/*", recursive=True) +
           glob.glob(root + "/**/.*.sparkrack-partial", recursive=True) if os.path.isfile(p))
if have >= at:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and b"class FileSink" in argv[2]:
            os.kill(int(pid), signal.SIGKILL)
            print("killed")
'''
    node = rack.node(name)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if "killed" in nodeproc.in_node(node, ["python3", "-c", finder, root, str(at)]).stdout:
            return
        time.sleep(0.05)


if __name__ == "__main__":
    main()
