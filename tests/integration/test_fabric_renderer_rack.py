"""Role fabric under the daemon netplan renders with: a node booted with systemd-networkd
and one booted with NetworkManager (Debian's network-manager, running in the node, as
NVIDIA's performance guide sets `renderer: NetworkManager`) get the fabric's addresses
and MTU from `invoke provision`, and have them again after a reboot with no provisioning;
a node whose netplan names a daemon that does not run is refused in one line.

NVIDIA's 40-cx7.yaml names NetworkManager here: role fabric takes the netdevs over from it
and its drop-in keeps NetworkManager for them. One node (spark-08) is changed; the module
puts it back: its netplan files as found, networkd, provisioned.
"""


import pytest
from hosttools import need
from provision_helpers import failures

from sparkrack.provision import provision
from sparkrack.rehearsal import nodeproc

pytestmark = pytest.mark.rack

NODE = "spark-08"
CX7 = "/etc/netplan/40-cx7.yaml"
REPLACED = "/var/lib/sparkrack/netplan-replaced/40-cx7.yaml"  # where the take-over moves it
DROPIN = "/etc/netplan/60-sparkrack-fabric.yaml"
PORT, TWIN = "enp1s0f0np0", "enP2p1s0f0np0"


def in_node(rack, *argv: str) -> str:
    done = nodeproc.in_node(rack.node(NODE), list(argv), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def nvidia_nm(node) -> bytes:
    """40-cx7.yaml as NVIDIA's performance guide has it: NetworkManager renders the fabric
    (the rack's own addresses on port 0's two paths)."""
    return ("# NVIDIA DGX Spark performance guide: NetworkManager (rehearsal stand-in)\n"
            "network:\n  version: 2\n  renderer: NetworkManager\n  ethernets:\n"
            f"    {PORT}:\n      addresses: [{node.roce_addr}/24]\n"
            f"    {TWIN}:\n      addresses: [{node.twin_addr}/24]\n").encode()


def put(rack, path: str, text: bytes | None) -> None:
    """path on the node with text (0600), or no file there (None)."""
    if text is None:
        in_node(rack, "rm", "-f", path)
        return
    in_node(rack, "sh", "-c", 'mkdir -p "$(dirname "$2")" && umask 077 && '
            'printf "%s" "$1" > "$2.new" && mv "$2.new" "$2"', "sh", text.decode(), path)


def found(rack, path: str) -> bytes | None:
    done = nodeproc.in_node(rack.node(NODE), ["cat", path])
    return done.stdout.encode() if done.returncode == 0 else None


def in_force(rack) -> dict[str, tuple[str, list[str]]]:
    """{netdev: (MTU, its IPv4 addresses)} as the node's kernel holds them."""
    held = {}
    for dev in (PORT, TWIN):
        mtu = in_node(rack, "cat", f"/sys/class/net/{dev}/mtu").strip()
        lines = in_node(rack, "ip", "-o", "-4", "addr", "show", "dev", dev).splitlines()
        held[dev] = (mtu, sorted(line.split()[3] for line in lines))
    return held


def cleared(rack) -> None:
    """The netdevs as a real reboot leaves them (no address, MTU 1500): the rack's network
    namespace outlives the node's boot, so this is done by hand before the reboot; what
    the node has afterwards its network daemon gave it while booting."""
    for dev in (PORT, TWIN):
        in_node(rack, "ip", "-4", "addr", "flush", "dev", dev)
        in_node(rack, "ip", "link", "set", "dev", dev, "mtu", "1500")
    assert in_force(rack) == {PORT: ("1500", []), TWIN: ("1500", [])}


@pytest.fixture(scope="module")
def as_found(rack, inventory):
    """The node put back afterwards: its netplan files as found, networkd, provisioned."""
    files = {path: found(rack, path) for path in (CX7, REPLACED)}
    yield
    for path, text in files.items():
        put(rack, path, text)
    put(rack, DROPIN, None)  # its NetworkManager lines would give NetworkManager's profiles
    rack.renderer(NODE, "networkd")
    rack.reboot(NODE)
    report = provision(inventory, NODE, roles="fabric")
    assert report.exit_code == 0, failures(report)


def test_a_renderer_that_does_not_run_is_refused_in_one_line(rack, inventory, as_found):
    rack.renderer(NODE, "networkd")
    rack.reboot(NODE)
    put(rack, CX7, nvidia_nm(rack.node(NODE)))
    report = provision(inventory, NODE, roles="fabric")
    assert report.exit_code == 1
    [failed] = [c for c in report.node(NODE).outcomes() if c.status == "failed"]
    assert failed.role == "fabric" and "\n" not in failed.summary
    assert failed.summary == (
        f"{NODE}: {CX7} renders {PORT} with NetworkManager, whose NetworkManager.service is "
        "masked, inactive, masked (the addresses would not be there after a reboot): "
        "`systemctl unmask NetworkManager.service && systemctl enable --now "
        f"NetworkManager.service`, or set `renderer: networkd` in {CX7}")
    assert found(rack, CX7) == nvidia_nm(rack.node(NODE))  # refused before the take-over
    put(rack, CX7, None)


@pytest.mark.parametrize("daemon", ["networkd", "NetworkManager"])
def test_the_fabric_is_in_force_under_the_renderer_and_after_a_reboot(rack, inventory,
                                                                     as_found, daemon):
    if daemon == "NetworkManager":
        need("nmcli")
    node = rack.node(NODE)
    rack.renderer(NODE, daemon)
    put(rack, CX7, nvidia_nm(node) if daemon == "NetworkManager" else None)
    put(rack, DROPIN, None)  # the fabric as before role fabric, under this daemon
    rack.reboot(NODE)
    running = {"networkd": "systemd-networkd.service", "NetworkManager": "NetworkManager.service"}
    assert in_node(rack, "systemctl", "is-active", running[daemon]).strip() == "active"
    cleared(rack)  # the role's check fails: it applies the drop-in under the daemon
    report = provision(inventory, NODE, roles="fabric")
    assert report.exit_code == 0 and report.recap(NODE)["changed"] >= 1, failures(report)
    want = {PORT: ("9000", [f"{node.roce_addr}/24"]), TWIN: ("9000", [f"{node.twin_addr}/24"])}
    assert in_force(rack) == want
    assert found(rack, CX7) is None  # taken over: the drop-in alone names the netdevs
    dropin = found(rack, DROPIN).decode()
    assert ("renderer: NetworkManager" in dropin) == (daemon == "NetworkManager"), dropin
    if daemon == "NetworkManager":  # NetworkManager holds them, from netplan's profiles
        devices = in_node(rack, "nmcli", "-t", "-f", "DEVICE,STATE,CONNECTION", "device")
        assert f"{PORT}:connected:netplan-{PORT}" in devices.splitlines(), devices
    cleared(rack)
    rack.reboot(NODE)
    assert in_force(rack) == want  # the NVIDIA guide's warning: not cleared by the reboot
    again = provision(inventory, NODE, roles="fabric")
    assert again.exit_code == 0 and again.recap(NODE)["changed"] == 0, failures(again)
