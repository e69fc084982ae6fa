"""The fabric check's node side (sparkrack/rails/): full-size frames to every peer and a
short burst to the neighbour on each rail. stdin: the run's token (line 1), never argv.

    rails serve HOLD PORT ADDR...    on each ADDR: a UDP echo (datagrams that start with
        the token come back whole) and a TCP sink that counts what each token-greeted
        stream sends; prints {addr: {"bytes": n, "seconds": s, "error": ""}} when stdin
        ends (the check closes it once every sender is done) or after HOLD s
    rails send SECONDS PORT MTU SRC DST OTHERS...  for each SRC DST OTHERS triple: one
        full-size datagram (an MTU-byte IP packet, don't fragment) from SRC to each of
        OTHERS (comma-separated, or -) and back, then to DST, then a TCP stream from SRC to
        DST for SECONDS; prints {src: {"reach": {other: "ok" | why}, "jumbo": "ok" | why,
        "bytes": n, "seconds": s, "error": ""}}
"""

import json
import os
import selectors
import socket
import sys
import time

HEADERS = 28  # an IP packet's IPv4 header (20) and UDP header (8) around the payload
CHUNK = 1 << 18
WAIT = 5.0  # how long a stream waits for its neighbour's sink (up by then: the echo was)
LISTENER = 30.0  # how long a sender waits for its neighbour's listener to start (its SSH
# session opens beside ours: seconds on a busy node)
JUMBO_WAIT = 3.0  # how long a full-size datagram may take once a small one came back
_IP_MTU_DISCOVER, _IP_PMTUDISC_DO = 10, 2


def serve(token, hold, port, *addrs):
    end = time.monotonic() + float(hold)
    sel = selectors.DefaultSelector()
    report = {addr: {"bytes": 0, "seconds": 0.0, "error": ""} for addr in addrs}
    for addr in addrs:
        try:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
            udp.bind((addr, int(port)))
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((addr, int(port)))
            tcp.listen(4)
        except OSError as error:
            report[addr]["error"] = f"{addr}:{port}: {error.strerror or error}"
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        sel.register(udp, selectors.EVENT_READ, ("udp", addr))
        sel.register(tcp, selectors.EVENT_READ, ("tcp", addr))
    streams = {}
    stdin = sys.stdin.fileno()
    sel.register(stdin, selectors.EVENT_READ, ("stdin", None))
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=max(0.05, end - time.monotonic())):
            kind, addr = key.data
            if kind == "stdin":
                if not os.read(stdin, 4096):
                    return _report(report, streams)
            elif kind == "udp":
                try:
                    data, peer = key.fileobj.recvfrom(65536)
                except OSError:
                    continue
                if data.startswith(token):
                    try:
                        key.fileobj.sendto(data, peer)
                    except OSError as error:
                        report[addr]["error"] = "echo: %s" % (error.strerror or error)
            elif kind == "tcp":
                try:
                    conn, _ = key.fileobj.accept()
                except OSError:
                    continue
                conn.settimeout(2)
                try:
                    greeting = conn.recv(len(token))
                except OSError:
                    greeting = b""
                if greeting != token:
                    conn.close()
                    continue
                conn.setblocking(False)
                streams[conn] = [addr, 0, time.monotonic()]
                sel.register(conn, selectors.EVENT_READ, ("stream", addr))
            else:
                entry = streams[key.fileobj]
                try:
                    data = key.fileobj.recv(CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    entry[1] += len(data)
                    continue
                sel.unregister(key.fileobj)
                key.fileobj.close()
                entry.append(round(time.monotonic() - entry[2], 3))
    return _report(report, streams)


def _report(report, streams):
    """Each address's report with the stream it sank (the last one, if several)."""
    for addr, count, _, *seconds in streams.values():
        if seconds:
            report[addr]["bytes"], report[addr]["seconds"] = count, seconds[0]
    return report


def _jumbo(token, src, dst, port, mtu=9000):
    """"ok" once a full-size datagram (an mtu-byte packet) came back whole, else why not. A small datagram first
    waits (up to LISTENER) for the neighbour's listener, which starts beside us; then the
    full-size one has JUMBO_WAIT: dropped on the way, a smaller MTU is the likely cause."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
        sock.bind((src, 0))
        sock.settimeout(0.5)
        try:
            if not _echoed(sock, token + b"s" * 36, dst, port, LISTENER):
                return f"no echo at all from {dst} within {LISTENER:g} s (its listener did not start, or " \
                    "the address is not reachable on this rail)"
        except OSError as error:
            return f"{error.strerror or error} sending to {dst}"
        try:
            if _echoed(sock, token + b"j" * (mtu - HEADERS - len(token)), dst, port,
                       JUMBO_WAIT):
                return "ok"
        except OSError as error:
            return "%s sending %d bytes (the path's MTU is below %d)" % (
                error.strerror or error, mtu - HEADERS, mtu)
        return "a small datagram came back, a %d-byte one did not within %g s (a smaller " \
            "MTU on the way?)" % (mtu - HEADERS, JUMBO_WAIT)


def _echoed(sock, payload, dst, port, seconds):
    """Whether payload, sent to dst every 0.5 s, came back whole within seconds."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock.sendto(payload, (dst, int(port)))
        try:
            if sock.recvfrom(65536)[0] == payload:
                return True
        except socket.timeout:
            continue
    return False


def _connect(src, dst, port):
    """A TCP connection from src to dst:port, retried while the listener is starting."""
    end = time.monotonic() + WAIT
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(WAIT)
        try:
            sock.bind((src, 0))
            sock.connect((dst, int(port)))
            return sock
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
        except OSError:
            sock.close()
            raise


def _stream(token, src, dst, port, seconds):
    """Send zeros from src to dst for seconds; (bytes, seconds) once the sink has them."""
    block = b"\0" * CHUNK
    with _connect(src, dst, port) as sock:
        sock.sendall(token)
        sent, started = 0, time.monotonic()
        end = started + float(seconds)
        while time.monotonic() < end:
            sock.sendall(block)
            sent += len(block)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)  # the sink closes once it has counted everything
    return sent, round(time.monotonic() - started, 3)


def send(token, seconds, port, mtu, *triples):
    report = {}
    for src, dst, others in zip(triples[0::3], triples[1::3], triples[2::3]):
        entry = {"dst": dst, "reach": {}, "jumbo": "", "bytes": 0, "seconds": 0.0, "error": ""}
        report[src] = entry
        try:
            for other in [] if others == "-" else others.split(","):
                entry["reach"][other] = _jumbo(token, src, other, port, int(mtu))
            entry["jumbo"] = _jumbo(token, src, dst, port, int(mtu))
            entry["bytes"], entry["seconds"] = _stream(token, src, dst, port, seconds)
        except OSError as error:
            entry["error"] = f"{src} -> {dst}: {error.strerror or error}"
    return report


def main(argv):
    verb, args = argv[0], argv[1:]
    token = sys.stdin.readline().strip().encode()
    if verb == "serve":
        print(json.dumps(serve(token, *args)))
        return 0
    report = send(token, *args)
    print(json.dumps(report))
    return 1 if any(entry["error"] for entry in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
