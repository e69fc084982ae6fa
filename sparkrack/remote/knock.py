"""Does anything answer at ADDR:PORT, as seen from this node? (break-glass asks the workers
whether they still reach the head: lifecycle/headgone.py)

    knock TIMEOUT ADDR:PORT...   one TCP connect to each at once, nothing sent; prints
        {target: "accepted" | "refused" | "silent" | "error ENAME"}

accepted and refused are answers (a refusal comes from the host's own kernel); silent is
no answer within TIMEOUT s, or no route to the host (the ARP or neighbour lookup found
nobody); anything else is reported by its errno name.
"""

import errno
import json
import socket
import sys
import threading

SILENT = (errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)


def knock(timeout, target):
    """How one connect to target (ADDR:PORT, [V6]:PORT) went."""
    addr, _, port = target.rpartition(":")
    try:
        socket.create_connection((addr.strip("[]"), int(port)), timeout=timeout).close()
    except socket.timeout:
        return "silent"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        if e.errno in SILENT:
            return "silent"
        return "error " + (errno.errorcode.get(e.errno or 0) or type(e).__name__)
    return "accepted"


def main():
    timeout, targets, found = float(sys.argv[1]), sys.argv[2:], {}

    def one(target):
        found[target] = knock(timeout, target)

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(json.dumps(found, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
