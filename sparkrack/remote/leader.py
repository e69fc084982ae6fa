"""A worker pod's view of its group's leader, in an exported lane (sparkrack/export/pods.py),
the leader's DNS name read from LWS_LEADER_ADDRESS (LeaderWorkerSet puts it in every
container of a group's pods, init containers included).

    wait SECONDS    the init container: until the name resolves (a line every 10 s), exit 1
                    past SECONDS: the engine never starts toward a leader it cannot find
"""

import os
import socket
import sys
import time

SAY_EVERY_S = 10.0


def wait(name, seconds):
    started = time.monotonic()
    said = -SAY_EVERY_S
    while True:
        try:
            address = socket.getaddrinfo(name, None)[0][4][0]
        except socket.gaierror as error:
            waited = time.monotonic() - started
            if waited >= seconds:
                print("the leader's address %s did not resolve within %d s (%s): its pod is "
                      "not up, or the cluster DNS does not serve the group's subdomain"
                      % (name, seconds, error), flush=True)
                return 1
            if waited - said >= SAY_EVERY_S:
                print("waiting for the leader's address %s to resolve (%d s of %d s)"
                      % (name, waited, seconds), flush=True)
                said = waited
            time.sleep(1.0)
            continue
        print(f"the leader's address {name} resolves to {address}", flush=True)
        return 0


def main(argv):
    name = os.environ.get("LWS_LEADER_ADDRESS", "")
    if not name:
        print("LWS_LEADER_ADDRESS is not set: not a LeaderWorkerSet pod")
        return 2
    if argv[:1] == ["wait"] and len(argv) == 2:
        return wait(name, float(argv[1]))
    print("usage: wait SECONDS")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
