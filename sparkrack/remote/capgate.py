"""An exported engine pod's gate, its first init container: the engine starts only on a node
whose clock cap the node agent judged ok in this boot of the node, recently
(docs/kubernetes.md#what-it-exports).

    python3 -c SCRIPT --node NODE [--wait SECONDS] [--fresh SECONDS] [--api URL]
        [--account DIR] [--boot-id-file FILE]
"""

import argparse
import sys
import time

from .capnode import BOOT_ID_FILE, FRESH_S, read_boot_id, refusal, stamp
from .kubeapi import ACCOUNT, Api

SAY_EVERY_S = 30.0
POLL_S = 5.0


def gate(api, node, boot, wait_s, fresh_s, say):
    """0 once node's record admits an engine pod; 1 past wait_s."""
    started = time.monotonic()
    said = None
    while True:
        try:
            why = refusal(api.node(node), boot, time.time(), fresh_s)
        except Exception as error:  # the API server out of reach: nothing is known
            why = f"its Node could not be read: {error}"
        if not why:
            say(f"{node}: clock cap verified ok in this boot ({boot}): the engine may start")
            return 0
        waited = time.monotonic() - started
        if waited >= wait_s:
            say("%s: refused after %d s: %s; the engine does not start here (kubectl get pods "
                "-A --field-selector spec.nodeName=%s finds the node agent there, its log says "
                "what it found)" % (node, waited, why, node))
            return 1
        if said is None or waited - said >= SAY_EVERY_S:
            say("%s: waiting for a fresh ok of this boot (%d s of %d s, %s): %s"
                % (node, waited, wait_s, stamp(time.time()), why))
            said = waited
        time.sleep(min(POLL_S, max(wait_s - waited, 0.1)))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="capgate", description="start an engine only on a node whose cap is verified")
    parser.add_argument("--node", required=True)
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait at most")
    parser.add_argument("--fresh", type=float, default=FRESH_S,
                        help="seconds an ok verdict holds")
    parser.add_argument("--api", default="", help="the API server (default: in-cluster)")
    parser.add_argument("--account", default=ACCOUNT, help="the service account's folder")
    parser.add_argument("--boot-id-file", default=BOOT_ID_FILE)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    def say(line):
        print(line, flush=True)

    try:
        boot = read_boot_id(args.boot_id_file)
    except OSError as error:
        say(f"{args.node}: refused: this node's boot id could not be read: {error}")
        return 1
    return gate(Api(args.api, args.account), args.node, boot, args.wait, args.fresh, say)


if __name__ == "__main__":
    sys.exit(main())
