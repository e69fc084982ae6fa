"""The nodes' docker limits adapter: a real rack is never probed nor fitted; a rehearsal
rack's options are fitted to what each node's dockerd can give, every deviation said."""

from pathlib import Path

import docker.types

from sparkrack.inventory import load_inventory
from sparkrack.lifecycle import nodelimits

REPO = Path(__file__).resolve().parents[3]

ASKED = {"image": "img", "device_requests": [docker.types.DeviceRequest(
    count=-1, capabilities=[["gpu"]])], "devices": ["/dev/infiniband:/dev/infiniband"],
    "ulimits": [docker.types.Ulimit(name="memlock", soft=-1, hard=-1),
                docker.types.Ulimit(name="nofile", soft=1048576, hard=1048576)]}


def test_a_real_rack_gets_the_options_as_asked_and_no_probe():
    real = load_inventory(REPO / "inventory" / "rack")
    limits = nodelimits.for_rack(None, real, ["spark-01"])  # no fleet: nothing is asked
    assert limits is nodelimits.EXACT
    assert limits.fit("spark-01", ASKED) == (ASKED, [])


def test_a_rehearsal_rack_is_probed_and_fitted(monkeypatch):
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    probed = nodelimits.parse_probe("memlock 8388608\nnofile 20000\n")
    monkeypatch.setattr(nodelimits, "probe", lambda fleet, nodes: {n: probed for n in nodes})
    limits = nodelimits.for_rack(object(), rehearsal, ["spark-01"])
    kwargs, changes = limits.fit("spark-01", ASKED)
    assert kwargs["device_requests"] == [] and kwargs["devices"] == []
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in kwargs["ulimits"]] == [
        ("memlock", 8388608, 8388608), ("nofile", 20000, 20000)]
    assert changes[0].startswith("--gpus all dropped") and len(changes) == 4
    assert ASKED["devices"] == ["/dev/infiniband:/dev/infiniband"]  # the request untouched


def test_a_node_that_gives_everything_changes_nothing():
    able = nodelimits.parse_probe("memlock unlimited\nnofile 1048576\ndevice /dev/infiniband\n"
                                  "gpu-hook /usr/bin\n")
    kwargs, changes = nodelimits.RehearsalLimits({"n": able}).fit("n", ASKED)
    assert changes == [] and kwargs["devices"] == ASKED["devices"]
