"""A docker SDK client per node, riding on the fleet's own SSH connection to that node.

docker-py's ssh:// transport (docker/transport/sshconn.py, SSHHTTPAdapter) builds its own
paramiko client: it reads ~/.ssh/config (which may redirect the host), loads the system
and user known_hosts, offers any key it finds and sets no channel timeout. Here the
adapter's two connection hooks are replaced so that its client is the fleet's connection
to the node (netguard-vetted address, the inventory's known_hosts only with unknown keys
refused, the inventory's key only, every wait bounded): each docker request is one more
channel on it (`docker system dial-stdio`), never a second login. The adapter is
mounted on an APIClient built with use_ssh_client=True (which routes requests to the
"ssh" adapter without connecting anywhere) and a fixed API version (no request at
construction); the server's API version is then read through our adapter, as
version="auto" would.
"""

from __future__ import annotations

from collections.abc import Callable

import docker
import paramiko
import requests
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.transport import SSHHTTPAdapter
from docker.transport.sshconn import SSHConnectionPool
from urllib3.connectionpool import HTTPConnectionPool

from sparkrack.fleet.ssh import UnreachableError, who
from sparkrack.inventory import Node

_MOUNT = "http+docker://ssh"  # where docker-py's APIClient sends every ssh:// request
_POOL = "dial-stdio"  # the key of the adapter's one pool
_NO_ANSWER = (docker.errors.DockerException, requests.RequestException, paramiko.SSHException,
              EOFError)


class PinnedSSHAdapter(SSHHTTPAdapter):
    """docker-py's SSH adapter whose paramiko client is the fleet's connection to node."""

    def __init__(self, node: Node, connection: Callable[[], paramiko.SSHClient],
                 timeout: float):
        """connection: the fleet's open client to node (reopened by the fleet if it died)."""
        self.node = node
        self._connection = connection
        super().__init__(_base_url(node), timeout=timeout)  # calls _connect

    def _create_paramiko_client(self, base_url: str) -> None:
        """Nothing to prepare: docker-py would read ssh_config and system host keys here."""

    def _connect(self) -> None:
        """Take the fleet's current connection to the node."""
        self.ssh_client = self._connection()

    def close(self) -> None:
        """Close this adapter's channels; the connection stays the fleet's to close."""
        self.pools.clear()

    def get_connection(self, url: str, proxies: dict | None = None) -> HTTPConnectionPool:
        """The adapter's one connection pool, whatever the url, on the fleet's connection
        again if the one it had died (docker-py itself would keep handing out channels of a
        dead transport). docker-py keeps a pool per whole URL, so each new path (every
        container's inspect) started one more `docker system dial-stdio` on the node
        (docker/docker-py#2966); one pool reuses its open channels for every request."""
        with self.pools.lock:
            transport = self.ssh_client.get_transport()
            if transport is None or not transport.is_active():
                self.pools.clear()
                self._connect()
            pool = self.pools.get(_POOL)
            if pool is None:
                pool = SSHConnectionPool(ssh_client=self.ssh_client, timeout=self.timeout,
                                         maxsize=self.max_pool_size, host=self.ssh_host)
                self.pools[_POOL] = pool
        return pool


class PinnedAPIClient(docker.APIClient):
    """docker's low-level APIClient whose every request goes through a PinnedSSHAdapter."""

    def __init__(self, adapter: PinnedSSHAdapter, timeout: float):
        super().__init__(base_url=_base_url(adapter.node), version=MINIMUM_DOCKER_API_VERSION,
                         timeout=timeout, use_ssh_client=True)
        self.mount(_MOUNT, adapter)  # replaces the shell-out adapter, which never connected
        self._custom_adapter = adapter  # docker-py's fallback for URLs no mount matches
        self._version = self.version(api_version=False)["ApiVersion"]


class PinnedDockerClient(docker.DockerClient):
    """docker.DockerClient around a PinnedAPIClient."""

    def __init__(self, api: PinnedAPIClient):
        self.api = api


def pinned_docker_client(node: Node, connection: Callable[[], paramiko.SSHClient]
                         ) -> docker.DockerClient:
    """A docker client to node's dockerd over connection (the fleet's client to node).

    Connection failures raise what connection raises; a dockerd that does not answer
    raises UnreachableError.
    """
    timeout = node.vars.ssh_command_timeout
    adapter = PinnedSSHAdapter(node, connection, timeout)
    try:
        return PinnedDockerClient(PinnedAPIClient(adapter, timeout))
    except BaseException as error:
        adapter.close()
        if isinstance(error, _NO_ANSWER):
            raise UnreachableError(f"{who(node)}: dockerd did not answer over SSH ({error})",
                                   fix="check `systemctl status docker` on the node") from None
        raise


def _base_url(node: Node) -> str:
    """ssh://user@address:port for node (IPv6 addresses in brackets)."""
    host = f"[{node.address}]" if ":" in node.address else node.address
    return f"ssh://{node.user}@{host}:{node.port}"
