#!/usr/bin/env python3
"""CPU of one facts round trip on a node: the process `python3 -I -S -c gather.py` that
answers every query of a round trip (docs/internals.md#the-facts-scripts-cost).

The watch polls every node every second with one (`sample_section`: the GPU line and the
memory), so its cost is the watch's, and the rack tests' (the suite is CPU-bound). Each
figure is the CPU (user + system) per process, measured here, beside two peers run in the
same loop: `python3 -I -S -c pass` (the floor of any Python command) and the same script
with the modules it no longer imports at its top (subprocess, json, hashlib, socket,
base64, shlex: the script as it was). nvidia-smi is a one-line shell script on PATH, so
the figure is the script's own, not the GPU's. Needs nothing but this machine's python3.

    python benchmarks/facts_script.py [--calls 60] [--python python3]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkrack.remote import script  # noqa: E402

OLD_IMPORTS = "import base64, hashlib, json, shlex, socket, subprocess\n"
QUERIES = {
    "sample (the watch's poll)": ["sample_section",
                                  json.dumps(["clocks.sm,power.draw,utilization.gpu", ""])],
    "file + unit (provision's)": ["file_section", json.dumps(["/etc/hostname", 65536]),
                                  "unit_section", json.dumps(["ssh.service", "ActiveState",
                                                              "true"])],
}


def cpu_ms(argv: list[str], calls: int, env: dict) -> float:
    """Mean CPU milliseconds (user + system) of argv's process, over calls runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(calls):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--python", default="python3", help="the nodes' interpreter")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        smi = Path(folder) / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho '2100, 12.5, 96'\n")
        smi.chmod(0o755)
        env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}
        python = [args.python, "-I", "-S", "-c"]
        text = script("gather")
        floor = cpu_ms([*python, "pass"], args.calls, env)
        print(f"{args.python} -I -S -c pass: {floor:.1f} ms CPU per process "
              f"({args.calls} calls each)")
        print(f"{'round trip':<28} {'now ms':>7} {'as was ms':>10} {'now/was':>8} "
              f"{'over the floor now/was':>23}")
        for name, queries in QUERIES.items():
            now = cpu_ms([*python, text, *queries], args.calls, env)
            was = cpu_ms([*python, OLD_IMPORTS + text, *queries], args.calls, env)
            print(f"{name:<28} {now:7.1f} {was:10.1f} {now / was:8.2f} "
                  f"{(now - floor) / (was - floor):23.2f}")


if __name__ == "__main__":
    main()
