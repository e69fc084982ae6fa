"""gpusimd's view of the node's RDMA devices (sim/gpusim/rdma.py): the whole tree for a
rank's NCCL set-up, the port states alone for its async thread's polls.
docs/rehearsal.md#the-stub-engines
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "sparkrack" / "rehearsal" / "sim"))
from gpusim import rdma  # noqa: E402


def hca(root: Path, name: str, state: str, gids: dict[str, str]) -> None:
    port = root / name / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    for index in range(256):  # a real port lists every entry, most of them empty
        gid = gids.get(str(index), rdma.EMPTY_GID)
        (port / "gids" / str(index)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(index)).write_text("RoCE v2\n" if str(
            index) in gids else "")


def test_the_port_states_are_read_rdmas_states_without_its_gid_walk(tmp_path, monkeypatch):
    """NCCL's async thread polls every second on every rank: it reads port 1's state of
    each HCA, the same as the whole read gives, and opens no GID entry (a GB10 port lists
    256; walking them at every poll cost each node about 1 % of a core at idle)."""
    hca(tmp_path, "rocep1s0f0", "4: ACTIVE", {"3": "0000:0000:0000:0000:0000:ffff:0a4d:030b"})
    hca(tmp_path, "roceP2p1s0f1", "1: DOWN", {})
    whole = rdma.read_rdma(str(tmp_path))
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: opened.append(str(path))
                        or real_open(path, *a, **k))
    states = rdma.read_port_states(str(tmp_path))
    assert states == {name: {"state": found["state"]} for name, found in whole.items()}
    assert states["roceP2p1s0f1"] == {"state": "1: DOWN"}
    assert sorted(opened) == sorted(str(tmp_path / name / "ports" / "1" / "state")
                                    for name in whole)


def test_no_devices_read_as_no_ports(tmp_path):
    assert rdma.read_port_states(str(tmp_path / "missing")) == {}
