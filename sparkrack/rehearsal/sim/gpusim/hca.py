"""The node's RoCE HCAs acknowledging RDMA writes (stdlib only).

On a real fabric an RDMA write is acknowledged by the responder's HCA, whatever its
process does: a rank stopped (SIGSTOP) or frozen (`docker pause`) still has its queue pairs
answered, and its peers wait in the collective until the engine's or NCCL's own watchdog;
only a dead process (its queue pairs destroyed), a dead node or a fabric that drops the
packets leaves a write unacknowledged, and NCCL fails it with IBV_WC_RETRY_EXC_ERR once the
HCA's retries are spent. gpusimd stands for the HCAs: a rank opens its rails here (its
queue pairs, for as long as its connection lives) and each write's datagram to
(address, roce_port) is echoed back from the node, not from the rank.
"""

import socket
import threading

RECV_TIMEOUT_S = 0.5  # how often an echo thread looks whether its rail was closed


class Rail:
    """One address's responder: its socket, the clients holding it, its echo thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.clients: set[int] = set()
        self.closed = threading.Event()
        threading.Thread(target=self._echo, daemon=True,
                         name=f"roce-{sock.getsockname()[0]}").start()

    def _echo(self) -> None:
        while not self.closed.is_set():
            try:
                data, peer = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                if self.closed.wait(0.25):  # never a busy loop on a failing socket
                    return
                continue
            try:
                self.sock.sendto(data, peer)
            except OSError:
                pass  # the reply does not fit the path back: the writer's retries say so

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


class Responders:
    """The rails the node's ranks opened: one echo per address, held while any client
    holding it is connected."""

    def __init__(self, port: int):
        self.port = port
        self._lock = threading.Lock()
        self._rails: dict[str, Rail] = {}

    def open(self, client: int, addresses: list[str]) -> list[str]:
        """Answer writes to each address for client; the addresses now answered (one that
        cannot be bound, not being the node's, is left out: writes to it go unanswered)."""
        answered = []
        with self._lock:
            for address in addresses:
                rail = self._rails.get(address)
                if rail is None:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    try:
                        sock.bind((address, self.port))
                    except OSError:
                        sock.close()
                        continue
                    sock.settimeout(RECV_TIMEOUT_S)
                    rail = self._rails[address] = Rail(sock)
                rail.clients.add(client)
                answered.append(address)
        return answered

    def release(self, client: int) -> None:
        """The client's process is gone: its queue pairs with it (rails no one holds close)."""
        with self._lock:
            for address, rail in list(self._rails.items()):
                rail.clients.discard(client)
                if not rail.clients:
                    rail.close()
                    del self._rails[address]

    def addresses(self) -> list[str]:
        with self._lock:
            return sorted(self._rails)
