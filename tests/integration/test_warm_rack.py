"""Warm restarts (issue 47, item 3) on the rehearsal rack: the first start of a lane compiles
into each node's cache folder for its image and GPU arch (real files, root's, bound into
every rank); a roll to another lane of the same image compiles its own kernels into the
same folder; the roll back to the lane that ran before finds its kernels and skips the
compile. `invoke caches` lists the folders and what keeps them; `caches.remove` refuses a
folder in use and removes only what no lane keeps. Every cache SGLang 0.5.22 compiles into
(DeepGEMM, FlashInfer, TVM-FFI, TileLang, CuTe DSL, torch extensions) is kept (issue 56,
item 7), and rank 0's HTTP port stays closed until every rank has loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.engines.compilecaches import CACHE_MOUNT, CACHE_ROOT, image_prefix
from sparkrack.fleet import Fleet
from sparkrack.lifecycle import lanes
from sparkrack.rehearsal.stub.compilecache import PARTS
from sparkrack.rehearsal.stub.modeldir import write_stub_model

pytestmark = pytest.mark.rack
REPO = Path(__file__).resolve().parents[2]
COMPILE_S = 8
STUB = {"load_delay_s": 0.3, "compile_s": COMPILE_S, "tokens_per_s": 50}
OLD = "sglang-0000000000000000-sm121"  # an image the rack no longer runs
ALL = len(PARTS["sglang"])  # the caches a stub SGLang rank compiles into


def invoke(inventory, *args: str) -> subprocess.CompletedProcess:
    """`invoke ARGS -i INVENTORY` as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "invoke", *args, "-i", str(inventory.path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SPARKRACK_SANDBOX": "1"})


def said_by(fleet, rank: int, node: str, needle: str) -> list[str]:
    """The lines of rank's stub log on node that hold needle."""
    text = fleet.docker(node).logs(f"sparkrack-sglang-r{rank}").decode(errors="replace")
    return [line for line in text.splitlines() if needle in line]


def test_a_roll_back_to_a_lane_that_ran_before_skips_the_compile(engine_rack):
    inventory = engine_rack
    lanes.down(inventory)
    with Fleet(inventory) as fleet:
        write_stub_model(fleet, STUB)
        fleet.run(["rm", "-rf", CACHE_ROOT]).raise_for_failures()  # every node starts cold
    said: list[str] = []
    progress = []
    try:
        cold = lanes.up(inventory, "sglang", "512k", on_event=said.append,
                        on_progress=progress.append)
        # SGLang opens rank 0's HTTP port once its schedulers are ready: no answer while
        # any worker still loads or compiles (not a 503 from the rendezvous on)
        answered = [p for p in progress if p.head_status is not None]
        assert answered and all(p.joined >= p.total - 1 for p in answered), progress
        assert any(p.head_status is None and p.elapsed >= COMPILE_S / 2 for p in progress)
        folder = f"{CACHE_ROOT}/sglang-{image_prefix(cold.image_id)}-sm121"
        assert "compile caches: empty on all 8 nodes: this start compiles, the next one of " \
               "this image will not" in said, said
        assert cold.phases["ready"] >= COMPILE_S
        with Fleet(inventory) as fleet:
            found = fleet.run(["sh", "-c", 'stat -c "%a %U" "$1" && ls "$1/deep_gemm/cache"',
                               "sh", folder])
            assert found.all_ok, [r.error or r.stderr for r in found]
            for result in found:
                mode, kernel = result.stdout.split("\n")[:2]
                assert mode == "700 root" and kernel.startswith("kernel.stub_fp8_gemm.")
            rank3 = fleet.docker_client("spark-04").containers.get("sparkrack-sglang-r3")
            binds = {m["Source"]: m for m in rank3.attrs["Mounts"]}
            assert binds[folder]["Destination"] == CACHE_MOUNT and binds[folder]["RW"]
            assert f"SGLANG_DG_CACHE_DIR={CACHE_MOUNT}/deep_gemm" in rank3.attrs["Config"]["Env"]
            assert said_by(fleet, 3, "spark-04", f"compile caches: 0 found, {ALL} compiled")
            kept = fleet.run(["ls", f"{folder}/sglang_jit/sm121/stub_norm", f"{folder}/tilelang",
                              f"{folder}/sglang/cute_aot", f"{folder}/torch_extensions"])
            assert kept.all_ok, [r.stderr for r in kept]

        said.clear()  # another lane of the same image: its own kernels, the same folder
        lanes.roll(inventory, "sglang", "131k-throughput",
                   on_event=said.append)
        assert any(line.startswith("compile caches: kept from an earlier start on all 8 "
                                   "nodes") for line in said), said
        with Fleet(inventory) as fleet:
            assert said_by(fleet, 0, "spark-01", f"compile caches: 0 found, {ALL} compiled")
            kernels = fleet.run(["ls", f"{folder}/deep_gemm/cache"])
            assert [len(r.stdout.split()) for r in kernels] == [2] * 8

        back = lanes.roll(inventory, "sglang", "512k")
        with Fleet(inventory) as fleet:
            for rank, node in ((0, "spark-01"), (5, "spark-06")):
                assert said_by(fleet, rank, node, f"compile caches: {ALL} found, 0 compiled")
        assert back.phases["ready"] < cold.phases["ready"] - COMPILE_S / 2, (cold.phases,
                                                                             back.phases)

        with Fleet(inventory) as fleet:  # a folder of an image gone from the rack
            fleet.run(["sh", "-c", 'mkdir -p "$1/deep_gemm" && echo {} > "$1/sparkrack-cache.json"',
                       "sh", f"{CACHE_ROOT}/{OLD}"]).raise_for_failures()
        listed = invoke(inventory, "caches")
        assert listed.returncode == 0, listed.stderr
        rows = {line.split("\t")[0]: line.split("\t") for line in listed.stdout.splitlines()}
        mine = rows[folder.rsplit("/", 1)[1]]
        assert mine[4] == "all" and mine[7].startswith("mounted by sparkrack-sglang-r")
        assert "the current deployment's image" in mine[7] and rows[OLD][7] == "nothing (removable)"
        refused = invoke(inventory, "caches.remove", "--folder", folder.rsplit("/", 1)[1])
        assert refused.returncode == 2 and "is in use: mounted by" in refused.stderr
        checked = invoke(inventory, "caches.remove", "--check")
        assert checked.returncode == 0, checked.stderr
        assert f"{OLD}\twould remove\t" in checked.stdout and "\tkept: mounted by" in checked.stdout
        removed = invoke(inventory, "caches.remove")
        assert removed.returncode == 0, removed.stderr
        with Fleet(inventory) as fleet:
            left = fleet.run(["ls", CACHE_ROOT])
            assert [r.stdout.split() for r in left] == [[folder.rsplit("/", 1)[1]]] * 8
    finally:
        lanes.down(inventory)
        with Fleet(inventory) as fleet:
            write_stub_model(fleet, {"load_delay_s": 0.3, "tokens_per_s": 50})
