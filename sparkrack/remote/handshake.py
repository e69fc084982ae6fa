"""The token handshake of every node-to-node connection (written once; stdlib only).

Streams (relay.py): the receiving side listens on its fabric address on a port picked for
this transfer and keeps only connections whose first line is `TOKEN INDEX`; anything else
is closed unread. Probes (probe.py): the listener speaks first, greeting each connection
with `sparkrack-probe TOKEN`, so a probe that reaches a running engine's port instead sends
it nothing and still knows it was not ours. The token comes in on the script's stdin, never
in argv (which `ps` shows every user).
"""

import socket
import time

WAIT = 60.0  # how long a listener waits for its peers, and a connector for its listener


def listen(addr, port, token, count=1, wait=WAIT, stall=300.0):
    """{index: connection} of `count` peers that presented token (socket.timeout if they
    do not all come within wait seconds)."""
    srv = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, int(port)))
    srv.listen(8)
    conns, end = {}, time.monotonic() + wait
    try:
        while len(conns) < count:
            srv.settimeout(max(0.1, end - time.monotonic()))
            conn, _ = srv.accept()
            conn.settimeout(wait)
            parts = read_line(conn).decode(errors="replace").split()
            if (len(parts) == 2 and parts[0] == token and parts[1].isdigit()
                    and int(parts[1]) < count and int(parts[1]) not in conns):
                conn.settimeout(stall)
                conns[int(parts[1])] = conn
            else:
                conn.close()
    finally:
        srv.close()
    return conns


def connect(addr, port, token, index=0, wait=WAIT, stall=300.0):
    """A connection to a listener, introduced with token (retried until wait runs out)."""
    end = time.monotonic() + wait
    while True:
        try:
            s = socket.create_connection((addr, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
    s.settimeout(stall)
    s.sendall(("%s %d\n" % (token, index)).encode())
    return s


def read_line(conn, limit=200):
    """The first line conn sends, byte by byte so nothing after it is consumed (b"" when
    the peer fails first)."""
    line = b""
    try:
        while not line.endswith(b"\n") and len(line) < limit:
            got = conn.recv(1)
            if not got:
                break
            line += got
    except OSError:
        return b""
    return line


def greeting(token):
    """A probe listener's first line: it tells the prober the port is ours."""
    return (f"sparkrack-probe {token}\n").encode()


def greet(conn, token):
    """Greet a probe's connection (a prober that left already is no error)."""
    try:
        conn.sendall(greeting(token))
    except OSError:
        pass


def greeted(conn, token):
    """Whether conn's peer greeted with token: our probe listener, not a service."""
    return read_line(conn).strip() == greeting(token).strip()
