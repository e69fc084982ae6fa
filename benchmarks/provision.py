#!/usr/bin/env python3
"""Provisioning cost on the 8 rehearsal nodes, against pyinfra and tuned ansible-core.

1. No-change `provision` of every role (sparkrack: one facts round trip per node), in
   process and as the `invoke provision` command, and in the same run the same
   file/unit/directory job (the six files the roles write, /etc/sparkrack, the clock cap
   unit enabled and started) done by pyinfra and by ansible-core with pipelining,
   ControlPersist and forks=8 (re-runs: nothing to change). Prints the ratios.
2. Image distribution: an image of --image-mb MB to the seven other nodes by sparkrack's
   pipelined chain (from the head, and from a tar on this machine), against one send of
   the same bytes over one link (docker save | one TCP hop, nothing loaded), one node's
   load, and a naive star (this machine streams the tar to seven `docker load`s at once).

pyinfra and ansible-core are installed in their own venv (--venv, default
/tmp/sparkrack-bench-venv) on first use. Needs root and `invoke rehearsal.up`. Leaves the
rack's provisioning as it was and removes its benchmark images. Prints figures only.

    python benchmarks/provision.py [--rounds 5] [--image-mb 300] [--skip-peers] [--skip-images]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # provision_helpers

from provision_helpers import inventory_copy, write_image_tar

from sparkrack.fleet import Fleet, sh
from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE
from sparkrack.inventory import load_inventory
from sparkrack.provision import provision, unprovision
from sparkrack.transfer.chain import Hop, NodeSource, run_chain
from sparkrack.transfer.images import file_chunks

FILE_ROLES = "clock_cap,node_limits,nccl_env,engine_env"
BENCH_REFS = {"sglang": "sparkrack-bench/sglang:small", "vllm": "sparkrack-bench/vllm:small"}
BIG_REF = "sparkrack-bench/big:1"
MANAGED = [  # (path, mode) the file roles write
    ("/etc/systemd/system/sparkrack-clock-cap.service", "644"),
    ("/etc/security/limits.d/90-sparkrack.conf", "644"),
    ("/etc/systemd/system/containerd.service.d/90-sparkrack-limits.conf", "644"),
    ("/etc/sparkrack/nccl.env", "644"),
    ("/etc/sparkrack/sglang.env", "600"),
    ("/etc/sparkrack/vllm.env", "600"),
]
TASKS_PY = """
from invoke import Collection
from sparkrack.cli import provision_tasks
ns = Collection(provision_tasks.provision)
"""


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def median_of(rounds: int, fn) -> float:
    return statistics.median(timed(fn) for _ in range(rounds))


def must(report, what: str):
    if report.exit_code != 0:
        raise SystemExit(f"{what} failed: " + "; ".join(
            f"{r.node} {r.status} {r.error or ''}" for r in report.nodes if r.status != "ok"))
    return report


def remove_images(inventory, *refs: str) -> None:
    with Fleet(inventory) as fleet:
        fleet.run(sh('docker image rm -f "$@" >/dev/null 2>&1; exit 0', "sh", *refs))


# --- 1. no-change provision --------------------------------------------------------------


def sparkrack_figures(bench_inventory, rounds: int, work: Path) -> dict[str, float]:
    must(provision(bench_inventory), "converging provision")
    api = median_of(rounds, lambda: must(provision(bench_inventory), "no-change provision"))
    files_only = median_of(rounds, lambda: must(provision(bench_inventory, roles=FILE_ROLES),
                                                "no-change provision"))
    (work / "tasks.py").write_text(TASKS_PY)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli():
        done = subprocess.run(["invoke", "provision", "-i", str(bench_inventory.path)],
                              cwd=work, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or "changed=0" not in done.stdout:
            raise SystemExit(f"invoke provision failed: {done.stdout[-500:]}{done.stderr[-500:]}")

    return {"api": api, "api_files": files_only, "cli": median_of(rounds, cli)}


def ensure_venv(venv: Path) -> Path:
    bin_dir = venv / "bin"
    if not (bin_dir / "pyinfra").exists() or not (bin_dir / "ansible-playbook").exists():
        print(f"installing pyinfra and ansible-core into {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(bin_dir / "pip"), "install", "-q", "pyinfra", "ansible-core"],
                       check=True)
    return bin_dir


def managed_files(inventory, work: Path) -> list[tuple[Path, str, str]]:
    """The files the roles wrote on the head, copied here as the peers' sources."""
    head = inventory.head.name
    with Fleet(inventory, [inventory.head]) as fleet:
        got = fleet.get({head: [path for path, _ in MANAGED]})[head]
    if not got.ok:
        raise SystemExit(f"cannot read the managed files: {got.error}")
    files = []
    for index, (path, mode) in enumerate(MANAGED):
        local = work / "files" / f"{index}-{Path(path).name}"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(got.files[path])
        files.append((local, path, mode))
    return files


def pyinfra_figure(inventory, bin_dir: Path, files, work: Path, rounds: int) -> float:
    hosts = ",\n".join(
        f'    ("{n.address}", {{"ssh_user": "{n.user}", "ssh_key": "{n.key_file}", '
        f'"ssh_known_hosts_file": "{inventory.known_hosts_path}", '
        f'"ssh_strict_host_key_checking": "yes"}})' for n in inventory.nodes)
    (work / "pyinfra_inventory.py").write_text(f"sparks = [\n{hosts},\n]\n")
    puts = "\n".join(
        f'files.put(name="{dest}", src="{src}", dest="{dest}", mode="{mode}", user="root", '
        f'group="root")' for src, dest, mode in files)
    (work / "pyinfra_deploy.py").write_text(textwrap.dedent("""\
        from pyinfra.operations import files, systemd
        files.directory(name="/etc/sparkrack", path="/etc/sparkrack", mode="755",
                        user="root", group="root")
        files.directory(name="drop-in dir", path="/etc/systemd/system/containerd.service.d",
                        mode="755", user="root", group="root")
        """) + puts + textwrap.dedent("""
        systemd.service(name="clock cap", service="sparkrack-clock-cap.service",
                        running=True, enabled=True)
        """))
    argv = [str(bin_dir / "pyinfra"), "pyinfra_inventory.py", "pyinfra_deploy.py", "-y"]

    def run():
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"pyinfra failed: {done.stdout[-800:]}{done.stderr[-800:]}")

    run()  # converge (the files are the same; owners and modes may be set once)
    return median_of(rounds, run)


def ansible_figure(inventory, bin_dir: Path, files, work: Path, rounds: int) -> float:
    lines = ["[sparks]"] + [
        f"{n.name} ansible_host={n.address} ansible_user={n.user} "
        f"ansible_ssh_private_key_file={n.key_file}" for n in inventory.nodes]
    (work / "hosts.ini").write_text("\n".join(lines) + "\n")
    control = Path(tempfile.mkdtemp(prefix="sr-ans-"))
    (work / "ansible.cfg").write_text(textwrap.dedent(f"""\
        [defaults]
        forks = 8
        host_key_checking = True
        gathering = explicit
        interpreter_python = /usr/bin/python3
        retry_files_enabled = False
        [ssh_connection]
        pipelining = True
        control_path_dir = {control}
        ssh_args = -o ControlMaster=auto -o ControlPersist=120s \
-o UserKnownHostsFile={inventory.known_hosts_path} -o StrictHostKeyChecking=yes
        """))
    playbook = [
        "- hosts: sparks",
        "  gather_facts: false",
        "  tasks:",
        "    - name: directories",
        ("      ansible.builtin.file: {path: '{{ item }}', state: directory, mode: '0755',"
         " owner: root, group: root}"),
        "      loop: [/etc/sparkrack, /etc/systemd/system/containerd.service.d]",
        "    - name: files",
        ("      ansible.builtin.copy: {src: '{{ item.src }}', dest: '{{ item.dest }}',"
         " mode: '{{ item.mode }}', owner: root, group: root}"),
        "      loop:",
        *(f"        - {{src: '{src}', dest: '{dest}', mode: '0{mode}'}}"
          for src, dest, mode in files),
        "    - name: clock cap unit",
        ("      ansible.builtin.systemd_service: {name: sparkrack-clock-cap.service,"
         " enabled: true, state: started}"),
    ]
    (work / "playbook.yml").write_text("\n".join(playbook) + "\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(work / "ansible.cfg"),
           "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp")}
    argv = [str(bin_dir / "ansible-playbook"), "-i", "hosts.ini", "playbook.yml"]

    def run():
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise SystemExit(f"ansible failed: {done.stdout[-1500:]}{done.stderr[-800:]}")

    try:
        run()  # converge, and open the ControlPersist masters
        return median_of(rounds, run)
    finally:
        for node in inventory.nodes:  # close the ControlPersist masters this run opened
            subprocess.run(["ssh", "-o", f"ControlPath={control}/%C", "-O", "exit",
                            f"{node.user}@{node.address}"], check=False, capture_output=True)
        shutil.rmtree(control, ignore_errors=True)


# --- 2. images ---------------------------------------------------------------------------


def relay_only(inventory, ref: str, hops: int) -> float:
    """docker save on the head | a chain of `hops` relays that forward and discard (no
    docker load): the transport alone. hops=1 is one send over one link, the floor."""
    head, chain = inventory.nodes[0], list(inventory.nodes[1:1 + hops])
    with Fleet(inventory, [head, *chain]) as fleet:
        fleet.run(["true"])  # connections warm, as in a transfer
        started = time.perf_counter()
        run = run_chain(fleet, NodeSource(head, ["save", ref]),
                        [Hop(node, ["none"]) for node in chain], timeout=600)
        seconds = time.perf_counter() - started
    failed = [r for r in (run.source, *run.results.values()) if not r.ok]
    if failed:
        raise SystemExit(f"relay chain failed: {failed[0].error}")
    return seconds


def image_figures(inventory, work: Path, megabytes: int) -> dict[str, float]:
    tar = work / "big.tar"
    print(f"building a {megabytes} MB image tar ...", file=sys.stderr)
    write_image_tar(tar, BIG_REF, megabytes << 20, seed=7)
    figures = {"bytes": tar.stat().st_size}
    remove_images(inventory, BIG_REF)
    head = inventory.head
    with Fleet(inventory, [head]) as fleet:
        figures["one_node_load"] = timed(lambda: fleet.stream(
            head.name, ["docker", "load"], file_chunks(tar), timeout=600))
    figures["one_link"] = relay_only(inventory, BIG_REF, 1)
    figures["chain_transport"] = relay_only(inventory, BIG_REF, 7)

    from_head = inventory_copy(inventory.path, work / "inv-big-head",
                               images={"sglang": BIG_REF}, rehearsal_image_sources={})
    report = must(provision(from_head, roles="engine_images"), "chain from the head")
    figures["chain_head"] = report.transfers[0].seconds
    figures["chain_head_run"] = report.seconds

    remove_images(inventory, BIG_REF)
    from_tar = inventory_copy(inventory.path, work / "inv-big-tar", images={"sglang": BIG_REF},
                              rehearsal_image_sources={"sglang": str(tar)})
    report = must(provision(from_tar, roles="engine_images"), "chain from the tar")
    figures["chain_tar"] = report.transfers[0].seconds

    remove_images(inventory, BIG_REF)
    others = list(inventory.nodes[1:])
    with Fleet(inventory, others) as fleet:
        from concurrent.futures import ThreadPoolExecutor

        def star():
            with ThreadPoolExecutor(max_workers=len(others)) as pool:
                results = list(pool.map(lambda n: fleet.stream(
                    n.name, ["docker", "load"], file_chunks(tar), timeout=1200), others))
            if not all(r.ok for r in results):
                raise SystemExit("star failed: " + "; ".join(r.error or "" for r in results))
        figures["star"] = timed(star)
    remove_images(inventory, BIG_REF)
    tar.unlink()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image-mb", type=int, default=300)
    parser.add_argument("--venv", default="/tmp/sparkrack-bench-venv")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--skip-images", action="store_true")
    args = parser.parse_args()
    os.environ.pop("HF_TOKEN", None)
    if not REHEARSAL_STATE_FILE.exists():
        raise SystemExit("the rehearsal rack is down: invoke rehearsal.up")
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    before = provision(inventory, roles=FILE_ROLES, check=True)
    was_provisioned = before.exit_code == 0 and before.changed == 0
    work = Path(tempfile.mkdtemp(prefix="sparkrack-bench-"))
    try:
        small = {e: write_image_tar(work / f"{e}.tar", ref, 4 << 20, seed=i)
                 for i, (e, ref) in enumerate(BENCH_REFS.items())}
        bench = inventory_copy(inventory.path, work / "inv", images=BENCH_REFS,
                               rehearsal_image_sources={e: str(work / f"{e}.tar")
                                                        for e in small})
        ours = sparkrack_figures(bench, args.rounds, work)
        print(f"no-change provision, all 5 roles, 8 nodes (median of {args.rounds}):")
        print(f"  sparkrack API        {ours['api']:.2f} s   (file roles only: "
              f"{ours['api_files']:.2f} s)")
        print(f"  invoke provision     {ours['cli']:.2f} s   (process start included)")
        if not args.skip_peers:
            bin_dir = ensure_venv(Path(args.venv))
            files = managed_files(inventory, work)
            pyinfra = pyinfra_figure(inventory, bin_dir, files, work, args.rounds)
            ansible = ansible_figure(inventory, bin_dir, files, work, args.rounds)
            print(f"  pyinfra re-run       {pyinfra:.2f} s   "
                  f"({pyinfra / ours['cli']:.1f}x invoke provision, "
                  f"{pyinfra / ours['api']:.1f}x the API)")
            print(f"  ansible-core re-run  {ansible:.2f} s   "
                  f"({ansible / ours['cli']:.1f}x invoke provision, "
                  f"{ansible / ours['api']:.1f}x the API; pipelining, ControlPersist warm, "
                  "forks=8)")
            print("  (peers: the same 2 directories, 6 files and 1 unit; sparkrack also "
                  "checks HCAs, GIDs, netdevs, 2 images, 2 more units)")
        remove_images(inventory, *BENCH_REFS.values())
        if not args.skip_images:
            f = image_figures(inventory, work, args.image_mb)
            mb = f["bytes"] / 1e6
            print(f"image of {mb:.0f} MB to the 7 other nodes (2-core machine: every load "
                  "shares the same 2 CPUs and disk):")
            print(f"  one link, no load    {f['one_link']:.2f} s   "
                  f"(docker save | one TCP hop; {mb / f['one_link']:.0f} MB/s)")
            print(f"  7-hop chain, no load {f['chain_transport']:.2f} s   "
                  f"({f['chain_transport'] / f['one_link']:.1f}x one link: the pipelining)")
            print(f"  one node's load      {f['one_node_load']:.2f} s   (this machine -> "
                  "head over SSH, docker load)")
            print(f"  chain from the head  {f['chain_head']:.2f} s   "
                  f"({f['chain_head'] / f['one_link']:.1f}x one link; whole provision run "
                  f"{f['chain_head_run']:.2f} s)")
            print(f"  chain from a tar     {f['chain_tar']:.2f} s   (8 nodes, fed from "
                  f"this machine over SSH; {f['chain_tar'] / f['one_link']:.1f}x one link)")
            print(f"  naive star           {f['star']:.2f} s   (this machine streams to 7 "
                  f"docker loads at once; {f['star'] / f['one_link']:.1f}x one link)")
    finally:
        remove_images(inventory, *BENCH_REFS.values(), BIG_REF)
        restore = provision if was_provisioned else unprovision
        restore(inventory, roles=FILE_ROLES)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
