"""The clock-cap agent of a Kubernetes node (sparkrack/export/agent.py ships it, composed
with capjudge.py, in a ConfigMap beside burn.sh; a DaemonSet runs it on every GB10 node,
in the lane's engine image).

    python3 capagent.py --node NODE --cap MHZ --label KEY --burn burn.sh
        [--every SECONDS] [--once] [--api URL] -- LOAD ARGV...

At start it takes the label off its node (fail closed: nothing is verified yet), locks the
GPU clock as role clock_cap's unit does at boot (`nvidia-smi -lgc 0,MHZ`), then every
SECONDS proves the cap under load: burn.sh runs the load and samples nvidia-smi as
`invoke burn` does, and capjudge.judge gives the verdict. The node carries KEY=true only
after an `ok`; any other verdict (UNCAPPED, LATCHED, NO LOAD, a failed check) removes it.
The periodic checks do not lock the clock again: a cap something reset is found and the
label removed, not hidden. SIGTERM removes the label and ends the agent. Each verdict goes
to the node's annotations (VERDICT_ANNOTATION, CHECKED_ANNOTATION) and to stdout.

The label is set through the API server with the pod's service account (a merge patch of
the Node: RBAC `get` and `patch` on nodes), over HTTPS to KUBERNETES_SERVICE_HOST with the
account's token and CA; --api replaces the server (the unit tests use a local one).
"""

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

from .capjudge import (
    BUSY_PERCENT, BUSY_SAMPLES, LOAD_RUNS, OK, SAMPLE_FIELDS, SAMPLE_SECONDS, UNCAPPED, judge,
    parse_output)

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
VERDICT_ANNOTATION = "sparkrack.io/clock-cap-verdict"
CHECKED_ANNOTATION = "sparkrack.io/clock-cap-checked"
RECORD = "/tmp/sparkrack-agent/burn.json"  # burn.sh makes its folder; nothing is kept there
CHECK_MARGIN_S = 120


class Api:
    """The Node objects of the API server, with the pod's service account."""

    def __init__(self, url, token_file, ca_file):
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.context = (ssl.create_default_context(cafile=ca_file)
                        if self.url.startswith("https:") else None)

    def patch_node(self, node, labels, annotations):
        """Merge-patch node's labels and annotations (None removes a key)."""
        body = json.dumps({"metadata": {"labels": labels, "annotations": annotations}})
        with open(self.token_file) as handle:
            token = handle.read().strip()
        request = urllib.request.Request(
            "%s/api/v1/nodes/%s" % (self.url, node), data=body.encode(), method="PATCH",
            headers={"Authorization": "Bearer " + token,
                     "Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(request, timeout=30, context=self.context) as answer:
            answer.read()


def lock_clock(cap):
    """`nvidia-smi -lgc 0,CAP`, as the clock_cap unit's ExecStart: '' or why it failed."""
    try:
        done = subprocess.run(["nvidia-smi", "-lgc", "0,%d" % cap], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return "nvidia-smi -lgc did not run: %s" % error
    if done.returncode:
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        return "nvidia-smi -lgc exited %d: %s" % (done.returncode, lines[-1] if lines else "")
    return ""


def check(burn, cap, load):
    """(verdict, reason) of one burn: burn.sh runs load and samples, capjudge judges."""
    argv = ["sh", burn, str(SAMPLE_SECONDS), RECORD, SAMPLE_FIELDS, str(BUSY_SAMPLES),
            str(LOAD_RUNS), str(BUSY_PERCENT)] + list(load)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=LOAD_RUNS * 60 + CHECK_MARGIN_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        return "ERROR", "the burn did not run: %s" % error
    _, samples, rc, tail = parse_output(done.stdout.decode(errors="replace"))
    verdict, reason, _, _ = judge(samples, cap, rc, tail)
    if verdict == UNCAPPED:  # the judge's words are the rack's; this is the cluster's way
        reason += "; here: delete this node's agent pod, whose restart locks the clock again"
    return verdict, reason


def decide(api, node, key, verdict, reason, say):
    """The label on node: KEY=true after ok, removed otherwise; the verdict annotated."""
    value = "true" if verdict == OK else None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        api.patch_node(node, {key: value}, {VERDICT_ANNOTATION: "%s: %s" % (verdict, reason),
                                            CHECKED_ANNOTATION: stamp})
    except Exception as error:  # the API server is out of reach: said, tried again next time
        say("%s: %s: %s; the label could not be %s: %s" % (
            node, verdict, reason, "set" if value else "removed", error))
        return False
    say("%s: %s: %s; label %s %s" % (node, verdict, reason, key,
                                     "set" if value else "removed"))
    return True


def arguments(argv):
    parser = argparse.ArgumentParser(
        prog="capagent", description="keep a node's clock-cap label only while the cap holds")
    parser.add_argument("--node", required=True)
    parser.add_argument("--cap", type=int, required=True, help="the clock cap in MHz")
    parser.add_argument("--label", required=True, help="the node label it keeps")
    parser.add_argument("--burn", required=True, help="the sampler, burn.sh")
    parser.add_argument("--every", type=float, default=600.0, help="seconds between checks")
    parser.add_argument("--once", action="store_true", help="one check, then end")
    parser.add_argument("--api", default="", help="the API server (default: in-cluster)")
    parser.add_argument("--account", default=ACCOUNT, help="the service account's folder")
    parser.add_argument("load", nargs=argparse.REMAINDER, help="-- the load's argv")
    args = parser.parse_args(argv)
    args.load = args.load[1:] if args.load[:1] == ["--"] else args.load
    if not args.load:
        parser.error("give the load's argv after --")
    return args


def main(argv=None):
    args = arguments(sys.argv[1:] if argv is None else argv)
    url = args.api or "https://%s:%s" % (os.environ.get("KUBERNETES_SERVICE_HOST", ""),
                                         os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
    api = Api(url, os.path.join(args.account, "token"), os.path.join(args.account, "ca.crt"))

    def say(line):
        print(line, flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    decide(api, args.node, args.label, "UNVERIFIED", "the agent starts: nothing checked yet",
           say)
    problem = lock_clock(args.cap)
    say("%s: %s" % (args.node, problem or "GPU clock locked at 0,%d MHz" % args.cap))
    while not stop.is_set():
        verdict, reason = check(args.burn, args.cap, args.load)
        decide(api, args.node, args.label, verdict, reason, say)
        if args.once:
            return 0 if verdict == OK else 1
        stop.wait(args.every)
    decide(api, args.node, args.label, "STOPPED", "the agent ended: nobody checks the cap",
           say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
