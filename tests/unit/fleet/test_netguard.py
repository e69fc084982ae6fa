"""netguard: which addresses may be contacted, sandboxed or not, rack up or down."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from sparkrack.core.errors import UnsafeAddressError
from sparkrack.fleet import netguard
from sparkrack.inventory import Node
from sparkrack.inventory.schema import RackVars

ROUTES_UP = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
*\t00004D0A\t00000000\t0001\t0\t0\t4000\t0000FFFF\t0\t0\t0
srbr0\t00014D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""
ROUTES_DOWN = "\n".join(line for line in ROUTES_UP.splitlines() if not line.startswith("*"))

NODE = Node(name="spark-03", address="10.77.1.13", port=22, user="root", key_file=None, rank=2,
            roce_addr="10.77.1.13", vars=RackVars())


def node(address: str) -> Node:
    """spark-03 at address."""
    return dataclasses.replace(NODE, address=address)


@pytest.fixture
def fake_rack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A rehearsal rack that looks up: state file, bridge and blackhole route, all fake."""
    state = tmp_path / "run" / "rack.json"
    state.parent.mkdir()
    state.write_text("{}")
    (tmp_path / "net" / netguard.REHEARSAL_BRIDGE).mkdir(parents=True)
    (tmp_path / "route").write_text(ROUTES_UP)
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n10.77.1.13 spark-03 # rack\n"
                                    "192.0.2.50 example-box\n")
    monkeypatch.setattr(netguard, "REHEARSAL_STATE_FILE", state)
    monkeypatch.setattr(netguard, "SYS_CLASS_NET", tmp_path / "net")
    monkeypatch.setattr(netguard, "PROC_NET_ROUTE", tmp_path / "route")
    monkeypatch.setattr(netguard, "HOSTS_FILE", tmp_path / "hosts")
    monkeypatch.setattr(netguard, "REHEARSAL_NODE_MARK", tmp_path / "gpu-sim" / "node.json")
    monkeypatch.setenv(netguard.SANDBOX_ENV, "1")
    return tmp_path


def refusal(target: Node) -> str:
    """The one-line message of the UnsafeAddressError that checking target raises."""
    with pytest.raises(UnsafeAddressError) as caught:
        netguard.check_node(target)
    line = caught.value.line()
    assert "\n" not in line
    return line


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.5", "::1", "10.77.1.13"])
def test_sandbox_allows_loopback_and_the_running_rack(fake_rack: Path, address: str):
    assert netguard.check_node(node(address)) == address


@pytest.mark.parametrize("address", ["192.168.1.10", "8.8.8.8", "10.78.0.1", "2001:db8::1"])
def test_sandbox_refuses_everything_else(fake_rack: Path, address: str):
    assert refusal(node(address)) == (
        f"spark-03 ({address}): not on this machine; with SPARKRACK_SANDBOX=1 only loopback "
        "and the rehearsal subnet 10.77.0.0/16 may be contacted (use the rehearsal "
        "inventory, inventory/rehearsal)")


def test_outside_the_sandbox_real_addresses_are_allowed(fake_rack: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(netguard.SANDBOX_ENV)
    assert netguard.check_node(node("192.168.1.10")) == "192.168.1.10"


@pytest.mark.parametrize("sandbox", ["1", None])
@pytest.mark.parametrize("address", ["192.0.2.11", "192.0.2.2", "198.51.100.11",
                                     "203.0.113.7", "::ffff:192.0.2.11"])
def test_example_addresses_are_always_refused(fake_rack: Path, monkeypatch: pytest.MonkeyPatch,
                                              address: str, sandbox: str | None):
    if sandbox is None:
        monkeypatch.delenv(netguard.SANDBOX_ENV)
    shown = address if "::" not in address else f"{address} = 192.0.2.11"
    assert refusal(node(address)) == (
        f"spark-03 ({shown}): the address is an example from the inventory (put your "
        "node's real address in the inventory's hosts.yml)")


@pytest.mark.parametrize("sandbox", ["1", None])
@pytest.mark.parametrize("broken, reason", [
    ("state", "no {state}"),
    ("bridge", "no bridge srbr0"),
    ("route", "no blackhole route for 10.77.0.0/16"),
])
def test_rack_addresses_are_refused_while_the_rack_is_down(
        fake_rack: Path, monkeypatch: pytest.MonkeyPatch, broken: str, reason: str,
        sandbox: str | None):
    if sandbox is None:
        monkeypatch.delenv(netguard.SANDBOX_ENV)
    if broken == "state":
        netguard.REHEARSAL_STATE_FILE.unlink()
    elif broken == "bridge":
        (fake_rack / "net" / "srbr0").rmdir()
    else:
        (fake_rack / "route").write_text(ROUTES_DOWN)
    reason = reason.format(state=fake_rack / "run" / "rack.json")
    assert refusal(NODE) == ("spark-03 (10.77.1.13): rehearsal rack is down: run "
                             f"`invoke rehearsal.up` ({reason})")


# A rehearsal node's own namespace: its two links on the rack's /24s, no default route.
ROUTES_IN_NODE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
enp1s0f0np0\t00014D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
enP2p1s0f0np0\t00024D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


@pytest.mark.parametrize("sandbox", ["1", None])
def test_inside_a_rehearsal_node_the_rack_is_up(fake_rack: Path, monkeypatch: pytest.MonkeyPatch,
                                                sandbox: str | None):
    """The watchdog service on a node: no state file, bridge or blackhole is visible there,
    but the node's identity file and a namespace without a default route are."""
    if sandbox is None:
        monkeypatch.delenv(netguard.SANDBOX_ENV)
    netguard.REHEARSAL_STATE_FILE.unlink()
    (fake_rack / "net" / "srbr0").rmdir()
    (fake_rack / "route").write_text(ROUTES_IN_NODE)
    assert "rehearsal rack is down" in refusal(NODE)  # no identity file: not a node
    netguard.REHEARSAL_NODE_MARK.parent.mkdir()
    netguard.REHEARSAL_NODE_MARK.write_text('{"node": "spark-01"}')
    assert netguard.inside_rehearsal_node()
    assert netguard.check_node(NODE) == "10.77.1.13"
    (fake_rack / "route").write_text(ROUTES_UP)  # a default route: packets could leave
    assert not netguard.inside_rehearsal_node()
    assert "rehearsal rack is down" in refusal(NODE)


def test_default_route_is_recognised():
    assert netguard.default_route_present(ROUTES_UP)
    assert not netguard.default_route_present(ROUTES_IN_NODE)
    assert not netguard.default_route_present("")


def test_blackhole_route_is_recognised_only_for_the_rehearsal_subnet():
    assert netguard.blackhole_present(ROUTES_UP)
    assert not netguard.blackhole_present(ROUTES_DOWN)
    assert not netguard.blackhole_present(ROUTES_UP.replace("0000FFFF", "00FFFFFF"))
    assert not netguard.blackhole_present(ROUTES_UP.replace("*\t", "eth0\t"))
    assert not netguard.blackhole_present("")


def test_sandbox_names_come_from_the_hosts_file_never_dns(fake_rack: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    def no_dns(*args: object, **kwargs: object) -> None:
        raise AssertionError("DNS was asked")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    assert netguard.check_node(node("localhost")) == "127.0.0.1"
    assert netguard.check_node(node("SPARK-03")) == "10.77.1.13"
    assert "example from the inventory" in refusal(node("example-box"))
    assert refusal(node("spark-09.lan")) == (
        f"spark-03 (spark-09.lan): name not in {fake_rack / 'hosts'}, and the sandbox never asks "
        "DNS (use an IP address in the inventory)")


def test_outside_the_sandbox_every_resolved_address_is_checked(fake_rack: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(netguard.SANDBOX_ENV)
    answers = {"good.lan": ["192.168.1.3"], "mixed.lan": ["192.168.1.3", "203.0.113.9"]}

    def resolver(name: str, port: int, **kwargs: object) -> list[tuple]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[name]]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    assert netguard.check_node(node("good.lan")) == "192.168.1.3"
    assert refusal(node("mixed.lan")).startswith(
        "spark-03 (mixed.lan = 203.0.113.9): the address is an example from the inventory")
