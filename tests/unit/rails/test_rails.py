"""The fabric check's pairs and verdicts (pure)."""

import dataclasses

from freeport import free_port

from sparkrack.facts.onboard import NetdevFacts
from sparkrack.facts.roce import Function
from sparkrack.rails.verdicts import Measured, Pair, Rail, judge, pairs, rails_of

NODES = [f"spark-0{i}" for i in range(1, 5)]


def rails(node: str, index: int, port: int = 0) -> list[Rail]:
    """A node cabled on port (both paths): path a on 10.77.3.0/24, path b on 10.77.4.0/24."""
    functions = {
        f"rocep1s0f{port}": Function(f"rocep1s0f{port}", (f"enp1s0f{port}np{port}",), "4: ACTIVE"),
        f"roceP2p1s0f{port}": Function(f"roceP2p1s0f{port}", (f"enP2p1s0f{port}np{port}",),
                                       "4: ACTIVE"),
        f"rocep1s0f{1 - port}": Function(f"rocep1s0f{1 - port}", (f"enp1s0f{1 - port}np{1 - port}",),
                                         "1: DOWN")}
    links = {f"enp1s0f{port}np{port}": NetdevFacts(9000, "up", f"10.77.3.{index}/24"),
             f"enP2p1s0f{port}np{port}": NetdevFacts(9000, "up", f"10.77.4.{index}/24")}
    return rails_of(node, functions, links)


def test_each_node_sends_to_its_neighbour_on_every_rail_the_last_to_the_first():
    found, problems = pairs(NODES, {n: rails(n, 11 + i) for i, n in enumerate(NODES)})
    assert problems == []
    assert [(p.src.node, p.dst.node, p.src.netdev) for p in found[:2]] == [
        ("spark-01", "spark-02", "enp1s0f0np0"), ("spark-01", "spark-02", "enP2p1s0f0np0")]
    assert (found[-1].src.node, found[-1].dst.node) == ("spark-04", "spark-01")
    assert len(found) == 8 and found[0].dst.ipv4 == "10.77.3.12"


def test_a_node_on_the_other_port_pairs_by_subnet_and_a_missing_peer_is_named():
    by_node = {n: rails(n, 11 + i) for i, n in enumerate(NODES)}
    by_node["spark-03"] = rails("spark-03", 13, port=1)
    found, problems = pairs(NODES, by_node)
    assert problems == [] and any(
        (p.src.netdev, p.dst.netdev) == ("enp1s0f0np0", "enp1s0f1np1") for p in found)
    by_node["spark-03"] = rails("spark-03", 13)[:1]  # one path only
    _, problems = pairs(NODES, by_node)
    assert problems == ["spark-02: enP2p1s0f0np0 (roceP2p1s0f0, 10.77.4.12) has no peer on "
                        "spark-03 in 10.77.4.0/24"]
    by_node["spark-03"] = []
    _, problems = pairs(NODES, by_node)
    assert "spark-03: no RoCE function is up (no cable?)" in problems


def measured(found, slow=(), jumbo=None):
    return [Measured(p, (jumbo or {}).get(p.src.node, "ok"),
                     (100_000_000 if (p.src.node, p.dst.node) in slow else 1_000_000_000), 1.0,
                     reach={r.ipv4: "ok" for r in p.others})
            for p in found]


def test_a_rail_far_below_the_racks_median_is_named_with_the_node_it_shares():
    found, _ = pairs(NODES, {n: rails(n, 11 + i) for i, n in enumerate(NODES)})
    path_b = [p for p in found if p.src.netdev == "enP2p1s0f0np0"]
    results = measured(path_b, slow={("spark-01", "spark-02"), ("spark-02", "spark-03")})
    results += measured([p for p in found if p not in path_b])
    problems = judge(results)
    assert len(problems) == 2
    assert problems[0] == (
        "spark-01 -> spark-02 on enP2p1s0f0np0 (roceP2p1s0f0): 0.80 Gbit/s, far below the "
        "rack's median 8.00 Gbit/s (probably spark-02's enP2p1s0f0np0: every slow burst on "
        "it touches it)")
    assert judge(measured(found)) == []


def test_a_rack_whose_links_all_came_up_at_100g_is_named_though_the_median_is_even():
    """Every link negotiated 100G (ports/1/rate as mlx5 prints a breakout leg), every rail
    alike: the median names nothing; the rack's link rate and the floor do."""
    found, _ = pairs(NODES, {n: rails(n, 11 + i) for i, n in enumerate(NODES)})
    at = {"200": "200 Gb/sec (2X NDR)", "100": "100 Gb/sec (2X HDR)"}
    slow = [Measured(Pair(dataclasses.replace(p.src, rate=at["100"]), p.dst, p.others), "ok",
                     625_000, 1.0, reach={r.ipv4: "ok" for r in p.others}) for p in found]
    problems = judge(slow, link_gbit=200, scale=1000)
    assert ("spark-01: enp1s0f0np0 (rocep1s0f0) negotiated 100 Gb/sec (2X HDR), below the "
            "rack's 200 Gb/sec (fabric_link_gbit): a breakout leg, a cable or a switch port "
            "set slower") in problems
    assert ("spark-01 -> spark-02 on enp1s0f0np0 (rocep1s0f0): 5.0 Gbit/s, below the floor "
            "of 10 Gbit/s (10% of its negotiated 100)") in problems
    assert judge(slow, link_gbit=100, scale=1000) == [p for p in problems if "floor" in p]
    assert not any("median" in p for p in problems)
    fast = [Measured(Pair(dataclasses.replace(p.src, rate=at["200"]), p.dst, p.others), "ok",
                     23_750_000, 1.0, reach={r.ipv4: "ok" for r in p.others}) for p in found]
    assert judge(fast, link_gbit=200, scale=1000) == []  # 190 Mbit/s paced: 190G


def test_a_dropped_jumbo_frame_and_a_failed_burst_are_named():
    found, _ = pairs(NODES, {n: rails(n, 11 + i) for i, n in enumerate(NODES)})
    results = measured(found, jumbo={"spark-03": "Message too long sending 8972 bytes"})
    results[0] = Measured(found[0], error="10.77.3.11 -> 10.77.3.12: Connection refused")
    problems = judge(results)
    assert problems[0] == ("spark-01 -> spark-02 on enp1s0f0np0 (rocep1s0f0): 10.77.3.11 -> "
                           "10.77.3.12: Connection refused")
    assert ("spark-03 -> spark-04 on enp1s0f0np0 (rocep1s0f0): a 9000-byte frame did not "
            "pass: Message too long sending 8972 bytes") in problems
    assert isinstance(found[0], Pair)


def test_the_node_script_echoes_a_jumbo_frame_and_counts_a_burst_on_loopback():
    """remote/rails.py as the nodes run it: serve on one address, send to it."""
    import json
    import subprocess
    import sys

    from sparkrack import remote

    port = str(free_port())
    token = b"t0ken\n"
    server = subprocess.Popen(remote.argv(sys.executable, "rails", "serve", "20", port,
                                          "127.0.0.1"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=False)
    server.stdin.write(token)
    server.stdin.flush()
    sent = subprocess.run(remote.argv(sys.executable, "rails", "send", "0.3", port, "9000",
                                      "127.0.0.1", "127.0.0.1", "127.0.0.1"), input=token,
                          capture_output=True, timeout=30)
    heard = json.loads(server.communicate(timeout=30)[0])  # closes its stdin
    report = json.loads(sent.stdout)["127.0.0.1"]
    assert sent.returncode == 0 and report["jumbo"] == "ok" and report["error"] == ""
    assert report["reach"] == {"127.0.0.1": "ok"}
    assert report["bytes"] > 0 and heard["127.0.0.1"]["bytes"] == report["bytes"]


def test_a_path_that_drops_full_size_frames_is_told_from_a_missing_listener(monkeypatch):
    """The sender's first datagram is small: it waits for the neighbour's listener. A path
    that passes it but drops the full-size one is named as an MTU problem, and nothing
    listening as a listener that did not start."""
    import socket
    import threading

    from sparkrack.remote import rails as node_script

    monkeypatch.setattr(node_script, "LISTENER", 1.0)
    monkeypatch.setattr(node_script, "JUMBO_WAIT", 1.0)
    token = b"t0ken\n"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as switch:  # echoes up to 1500 bytes
        switch.bind(("127.0.0.1", 0))
        switch.settimeout(3)
        port = switch.getsockname()[1]

        def echo_small() -> None:
            try:
                while True:
                    data, peer = switch.recvfrom(65536)
                    if len(data) <= 1500:
                        switch.sendto(data, peer)
            except OSError:
                pass

        threading.Thread(target=echo_small, daemon=True).start()
        assert node_script._jumbo(token, "127.0.0.1", "127.0.0.1", port) == (
            "a small datagram came back, a 8972-byte one did not within 1 s (a smaller MTU on "
            "the way?)")
        assert node_script._jumbo(token, "127.0.0.1", "127.0.0.1", port, 1500) == "ok"
    assert node_script._jumbo(token, "127.0.0.1", "127.0.0.1", port) == (
        "no echo at all from 127.0.0.1 within 1 s (its listener did not start, or the address "
        "is not reachable on this rail)")


def test_every_node_sends_a_full_size_frame_to_every_other_and_a_dropped_one_is_named():
    found, _ = pairs(NODES, {n: rails(n, 11 + i) for i, n in enumerate(NODES)})
    first = found[0]
    assert (first.src.node, first.dst.node) == ("spark-01", "spark-02")
    assert [r.node for r in first.others] == ["spark-03", "spark-04"]
    assert {r.network for r in first.others} == {first.src.network}
    results = [Measured(p, "ok", 1_000_000_000, 1.0, reach={
        r.ipv4: (f"no echo at all from {r.ipv4} within 30 s" if r.node == "spark-04"
                 and p.src.node == "spark-01" else "ok") for r in p.others}) for p in found]
    assert [p for p in judge(results)] == [
        "spark-01 -> spark-04 on enp1s0f0np0 (rocep1s0f0): a 9000-byte frame did not pass: "
        "no echo at all from 10.77.3.14 within 30 s",
        "spark-01 -> spark-04 on enP2p1s0f0np0 (roceP2p1s0f0): a 9000-byte frame did not "
        "pass: no echo at all from 10.77.4.14 within 30 s"]


def test_an_hca_of_nccl_ib_hca_down_or_missing_is_named_as_carrying_nothing():
    """Issue 56, item 4: a port gone down while serving carries none of its share; NCCL
    skips it in silence. The check names it, what NCCL does and the fix."""
    from sparkrack.rails.verdicts import idle_rails

    functions = {"rocep1s0f0": Function("rocep1s0f0", ("enp1s0f0np0",), "4: ACTIVE"),
                 "roceP2p1s0f0": Function("roceP2p1s0f0", ("enP2p1s0f0np0",), "1: DOWN")}
    assert idle_rails("spark-03", ["rocep1s0f0"], functions) == []
    assert idle_rails("spark-03", ["rocep1s0f0", "roceP2p1s0f0"], functions) == [
        "spark-03: roceP2p1s0f0 (enP2p1s0f0np0) of nccl_ib_hca carries nothing: its port is "
        "down (1: DOWN); NCCL skips it without an error and runs on rocep1s0f0 alone, about "
        "1/2 of the node's bandwidth; reseat its cable (`invoke run --limit spark-03 -- "
        "ibdev2netdev` shows the ports)"]
    assert idle_rails("spark-03", ["rocep1s0f0", "rocep2p1s0f0"], functions) == [
        "spark-03: rocep2p1s0f0 of nccl_ib_hca is no RDMA device of spark-03 (it has "
        "rocep1s0f0, roceP2p1s0f0): NCCL skips it without an error and runs on rocep1s0f0 "
        "alone, about 1/2 of the node's bandwidth; fix nccl_ib_hca in host_vars/spark-03.yml"]
    none = idle_rails("spark-03", ["roceP2p1s0f0"], functions)
    assert "falls back to TCP (NET/Socket)" in none[0]
