"""The clock-cap agent of a Kubernetes node: lock the clock, judge the cap (burn while no
engine runs, sample an engine's own load), record every verdict on the Node as label, taint
and annotations (docs/kubernetes.md#the-node-agent).

    python3 capagent.py --node NODE --namespace NS --cap MHZ --burn burn.sh
        [--every SECONDS] [--once] [--api URL] -- LOAD ARGV...
    python3 capagent.py alive FILE SECONDS      (its liveness probe)
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error

from .capjudge import (
    BUSY_PERCENT,
    BUSY_SAMPLES,
    LOAD_RUNS,
    NO_LOAD,
    OK,
    SAMPLE_FIELDS,
    SAMPLE_SECONDS,
    UNCAPPED,
    judge,
    max_clock,
    parse_output,
)
from .capnode import (
    BOOT,
    BOOT_ID_FILE,
    CHECKED,
    FRESH_S,
    GATE_CONTAINER,
    LABEL,
    TAINT,
    VERDICT,
    read_boot_id,
    record_of,
    stamp,
    taints_for,
)
from .kubeapi import ACCOUNT, CONFLICT, Api

RECORD = "/tmp/sparkrack-agent/burn.json"  # burn.sh makes its folder; nothing is kept there
ALIVE = "/tmp/sparkrack-agent/alive"
CHECK_MARGIN_S = 120
ERROR = "ERROR"  # the check did not run


def lock_clock(cap):
    """`nvidia-smi -lgc 0,CAP`, as the clock_cap unit's ExecStart: '' or why it failed."""
    try:
        done = subprocess.run(["nvidia-smi", "-lgc", "0,%d" % cap], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi -lgc did not run: {error}"
    if done.returncode:
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        return "nvidia-smi -lgc exited %d: %s" % (done.returncode, lines[-1] if lines else "")
    return ""


def sample(script, cap, load, seconds):
    """(verdict, reason) of script (burn.sh) running load (at most LOAD_RUNS times) while it samples."""
    argv = ["sh", script, str(SAMPLE_SECONDS), RECORD, SAMPLE_FIELDS, str(BUSY_SAMPLES),
            str(LOAD_RUNS), str(BUSY_PERCENT)] + list(load)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=LOAD_RUNS * seconds + CHECK_MARGIN_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        return ERROR, f"the burn did not run: {error}"
    output = done.stdout.decode(errors="replace")
    _, samples, rc, tail = parse_output(output)
    verdict, reason, _, _ = judge(samples, cap, rc, tail, max_clock(output))
    if verdict == UNCAPPED:  # the judge's words are the rack's; this is the cluster's way
        reason += "; here: delete this node's agent pod, whose restart locks the clock again"
    return verdict, reason


def check(args, serving):
    """(verdict, reason) of one check. While an engine may serve here (serving True, or None:
    its pods could not be read) the GPU is only sampled, never burned, and the verdict is
    '' when that gave nothing to judge by: the last verdict stands."""
    if serving is False:
        return sample(args.burn, args.cap, args.load, 60)
    verdict, reason = sample(args.burn, args.cap, ["sleep", str(args.watch)], args.watch)
    if verdict not in (NO_LOAD, ERROR):
        return verdict, reason + " (the engine's own load: nothing was burned)"
    if serving is None:
        return "", "its engine pods could not be read, so the GPU is not burned"
    if verdict == NO_LOAD:
        return "", ("the engine here is idle: nothing to judge its clock by, and the GPU it "
                    "serves from is not burned")
    return "", reason + "; the GPU the engine serves from is not burned"


def engines(api, args):
    """(an engine container runs here, an engine pod waits at its gate, ''), or (None,
    False, why) when the pods cannot be read."""
    try:
        pods = api.pods(args.namespace, args.node, args.engine_label)
    except Exception as error:
        return None, False, f"the engine pods of {args.node} could not be read: {Api.said(error)}"
    serving = any("running" in (status.get("state") or {})
                  for pod in pods for status in pod.get("status", {}).get("containerStatuses")
                  or [])
    waiting = any(status.get("name") == GATE_CONTAINER and "running" in (status.get("state") or {})
                  for pod in pods
                  for status in pod.get("status", {}).get("initContainerStatuses") or [])
    return serving, waiting, ""


def record(api, node, verdict, reason, boot, say):
    """The verdict on node: LABEL and TAINT as capnode says, the annotations; False when the
    API server refused or was out of reach (said; tried again at the next check)."""
    ok = verdict == OK
    metadata = {"labels": {LABEL: "true" if ok else None}, "annotations": {
        VERDICT: f"{verdict}: {reason}", CHECKED: stamp(time.time()), BOOT: boot}}
    error = None
    for _ in range(3):  # a taint change carries the Node's resourceVersion: again on 409
        try:
            current = api.node(node)
            taints = taints_for(current, verdict)
            body = {"metadata": dict(metadata)}
            if taints is not None:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                body["spec"] = {"taints": taints}
            api.patch_node(node, body)
        except urllib.error.HTTPError as refused:
            error = refused
            if refused.code == CONFLICT:
                continue
        except Exception as failed:  # out of reach: said, tried again next time
            error = failed
        else:
            say("{}: {}: {}; label {} {}, taint {} {}".format(
                node, verdict, reason, LABEL, "set" if ok else "removed", TAINT,
                "lifted" if ok else "set (NoExecute: an engine pod here is evicted)"))
            return True
        break
    say("{}: {}: {}; the label could not be {}: {}".format(
        node, verdict, reason, "set" if ok else "removed", Api.said(error)))
    return False


def start(api, args, boot, say):
    """The epoch of an ok of this boot the agent resumes, else None (UNVERIFIED recorded)."""
    try:
        verdict, _, checked, was = record_of(api.node(args.node))
    except Exception as error:
        verdict, checked, was = "", None, ""
        say(f"{args.node}: its Node could not be read: {error}")
    if verdict == OK and was == boot:
        try:
            api.patch_node(args.node, {"metadata": {"labels": {LABEL: "true"}}})
        except Exception as error:
            say(f"{args.node}: the label could not be set: {error}")
        say("{}: resuming: ok at {} in this boot; label {} set".format(
            args.node, stamp(checked) if checked else "?", LABEL))
        return checked
    record(api, args.node, "UNVERIFIED", "the agent starts: nothing judged in this boot yet",
           boot, say)
    return None


def leave(api, node, say):
    try:
        api.patch_node(node, {"metadata": {"labels": {LABEL: None}}})
        say(f"{node}: the agent ends: label {LABEL} removed (no new engine pod is placed here); the "
            "last verdict stands for the pods already here")
    except Exception as error:
        say(f"{node}: the agent ends; the label could not be removed: {error}")


def due(now, last, verified, serving, waiting, every):
    """A check now: the first, every seconds after the last, or for a pod at its gate."""
    if last is None or now - last >= every:
        return True
    return bool(waiting and not serving and (verified is None or now - verified > FRESH_S / 2))


def beat(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a"):
        os.utime(path)


def alive(path, seconds):
    """The liveness probe: 0 while path was touched within seconds."""
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError as error:
        print(f"the agent has given no sign of life: {error}")
        return 1
    if age > seconds:
        print("the agent's last sign of life was %d s ago, more than %d s: it is stuck"
              % (age, seconds))
        return 1
    return 0


def arguments(argv):
    parser = argparse.ArgumentParser(
        prog="capagent", description="keep a node's clock-cap label only while the cap holds")
    parser.add_argument("--node", required=True)
    parser.add_argument("--namespace", required=True, help="the engine pods' namespace")
    parser.add_argument("--cap", type=int, required=True, help="the clock cap in MHz")
    parser.add_argument("--burn", required=True, help="the sampler, burn.sh")
    parser.add_argument("--engine-label", default="sparkrack.engine",
                        help="the label key of the engine pods")
    parser.add_argument("--every", type=float, default=600.0, help="seconds between checks")
    parser.add_argument("--tick", type=float, default=20.0, help="seconds between looks")
    parser.add_argument("--watch", type=float, default=20.0,
                        help="seconds of one look at an engine's own load")
    parser.add_argument("--once", action="store_true", help="one check, then end")
    parser.add_argument("--api", default="", help="the API server (default: in-cluster)")
    parser.add_argument("--account", default=ACCOUNT, help="the service account's folder")
    parser.add_argument("--boot-id-file", default=BOOT_ID_FILE)
    parser.add_argument("--alive-file", default=ALIVE)
    parser.add_argument("load", nargs=argparse.REMAINDER, help="-- the load's argv")
    args = parser.parse_args(argv)
    args.load = args.load[1:] if args.load[:1] == ["--"] else args.load
    if not args.load:
        parser.error("give the load's argv after --")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["alive"] and len(argv) == 3:
        return alive(argv[1], float(argv[2]))
    args = arguments(argv)
    api = Api(args.api, args.account)
    boot = read_boot_id(args.boot_id_file)

    def say(line):
        print(line, flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    beat(args.alive_file)
    verified = start(api, args, boot, say)
    problem = lock_clock(args.cap)
    say("{}: {}".format(args.node, problem or "GPU clock locked at 0,%d MHz" % args.cap))
    last, unread = None, ""
    while not stop.is_set():
        beat(args.alive_file)
        serving, waiting, why = engines(api, args)
        if why != unread:
            say(why or f"{args.node}: the engine pods can be read again")
            unread = why
        now = time.time()
        if args.once or due(now, last, verified, serving, waiting, args.every):
            last = now
            verdict, reason = check(args, serving)
            if not verdict:
                say(f"{args.node}: {reason}; the last verdict stands")
            elif record(api, args.node, verdict, reason, boot, say) and verdict == OK:
                verified = time.time()
            if args.once:
                return 0 if verdict == OK else 1
        stop.wait(args.tick)
    leave(api, args.node, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
