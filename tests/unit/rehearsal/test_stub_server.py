"""The stub engines' HTTP server (rehearsal/stub/server.py) holds connections it has not
accepted yet as the engines' uvicorn does: a burst of them is queued, none is dropped."""

from __future__ import annotations

import socket

from sparkrack.rehearsal.stub.server import Server


def test_a_burst_of_connections_waits_in_the_listen_queue_none_is_dropped():
    server = Server("127.0.0.1", 0, routes=dict)  # listening, accepting nothing yet
    clients = []
    try:
        for _ in range(64):  # e.g. a router's new connections as the other rack drains
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            client.settimeout(0.5)  # the kernel's first SYN resend comes after 1 s
            clients.append(client)
            client.connect(server.server_address)
    finally:
        for client in clients:
            client.close()
        server.server_close()
    assert server.request_queue_size >= 2048  # uvicorn's default backlog
