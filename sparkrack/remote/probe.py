"""Onboarding's port probe (the verify step): do the new node and the rack reach each
other on the engine ports? stdin: the run's token (line 1), never argv.

    probe listen ADDR EXPECT HOLD PORT...   hold the free PORTs on ADDR for at most HOLD s
        (until each has EXPECT connections), greeting each with the token; prints
        {"bound": [port], "busy": {port: why}, "accepted": {port: [peer]}}
    probe connect WAIT HOST:PORT...         connect to each (retried for WAIT s), send
        nothing, read the greeting; prints {target: {"state": ok | service | failed,
        "detail": ...}}; exit 1 when one failed

A port a running engine holds is only connected to: a service answers no greeting
(`service`: reached, port in use), and it is sent nothing.
"""

import json
import selectors
import socket
import sys
import threading
import time

from .handshake import greet, greeted


def listen(token, addr, expect, hold, *ports):
    """Hold ports on addr, greeting every connection; print what was bound and heard."""
    expect, end = int(expect), time.monotonic() + float(hold)
    sel, report = selectors.DefaultSelector(), {"bound": [], "busy": {}, "accepted": {}}
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    for port in ports:
        s = socket.socket(fam)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, int(port)))
            s.listen(64)
        except OSError as e:
            report["busy"][port] = e.strerror or str(e)
            s.close()
            continue
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, port)
        report["bound"].append(port)
        report["accepted"][port] = []
    while report["bound"] and time.monotonic() < end:
        if all(len(report["accepted"][p]) >= expect for p in report["bound"]):
            break
        for key, _ in sel.select(timeout=max(0.05, end - time.monotonic())):
            try:
                conn, peer = key.fileobj.accept()
            except OSError:
                continue
            try:
                conn.setblocking(True)
                conn.settimeout(2)
                greet(conn, token)
            finally:
                conn.close()
            report["accepted"][key.data].append(peer[0])
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    print(json.dumps(report))
    return 0


def connect(token, wait, *targets):
    """Connect to every target at once; print how each went."""
    results, end = {}, time.monotonic() + float(wait)

    def one(target):
        addr, _, port = target.rpartition(":")
        addr = addr.strip("[]")
        while True:
            try:
                s = socket.create_connection((addr, int(port)), timeout=2)
            except OSError as e:
                if time.monotonic() > end:
                    results[target] = {"state": "failed",
                                       "detail": e.strerror or type(e).__name__}
                    return
                time.sleep(0.1)
                continue
            try:
                s.settimeout(1.5)
                ours = greeted(s, token)
            finally:
                s.close()
            results[target] = ({"state": "ok", "detail": "probe listener"} if ours else
                               {"state": "service", "detail": "a service answered (port in use)"})
            return

    threads = [threading.Thread(target=one, args=(x,)) for x in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(json.dumps(results))
    return 0 if all(r["state"] != "failed" for r in results.values()) else 1


def main():
    token = sys.stdin.readline().strip()  # never in argv: `ps` shows argv
    mode = {"listen": listen, "connect": connect}[sys.argv[1]]
    return mode(token, *sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
