"""The stub ranks judge their transport environment as NCCL and Gloo would on the node."""

import sys
from pathlib import Path

import pytest

from sparkrack.rehearsal.stub import transport

SIM_DIR = Path(__file__).resolve().parents[3] / "sparkrack" / "rehearsal" / "sim"

LL = "fe80:0000:0000:0000:ba3f:d2ff:fe01:0203"
V4 = "0000:0000:0000:0000:0000:ffff:0a4d:010f"  # ::ffff:10.77.1.15
ULA = "fd77:0000:0001:0000:ba3f:d2ff:fe01:0203"


def hca(state="4: ACTIVE", index=3):
    gids = {"0": LL, "1": LL}
    types = {"0": "IB/RoCE v1", "1": "RoCE v2"}
    for i in range(2, index - 1, 2):  # IPv6 pairs before the IPv4 one (renumbered firmware)
        gids.update({str(i): ULA, str(i + 1): ULA})
        types.update({str(i): "IB/RoCE v1", str(i + 1): "RoCE v2"})
    gids.update({str(index - 1): V4, str(index): V4})
    types.update({str(index - 1): "IB/RoCE v1", str(index): "RoCE v2"})
    return {"state": state, "gids": gids, "types": types}


HCAS = {"rocep1s0f0": hca(), "roceP2p1s0f0": hca()}
IFACES = {"lo": ["127.0.0.1/8"], "enp1s0f0np0": ["10.77.1.15/24"],
          "enP2p1s0f0np0": ["10.77.2.15/24"]}
GOOD = {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
        "NCCL_IB_DISABLE": "0"}
HEAD = "10.77.1.11"


def check(env=None, hcas=None, ifaces=None):
    return transport.check({**GOOD, **(env or {})}, HCAS if hcas is None else hcas,
                           IFACES if ifaces is None else ifaces, HEAD)


def test_the_provisioned_environment_passes_and_unset_variables_are_the_libraries_choice():
    assert check() is None
    assert transport.check({}, HCAS, IFACES, HEAD) is None


@pytest.mark.parametrize("name", ["eth9", "enp1s0f1np1"])
def test_gloo_needs_an_interface_with_an_ipv4_address(name):
    fault = check({"GLOO_SOCKET_IFNAME": name}, ifaces={**IFACES, "enp1s0f1np1": []})
    assert fault.library == "gloo"
    assert fault.error == ("RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/"
                           "transport/tcp/device.cc:83] ifa != nullptr. Unable to find "
                           f"address for: {name}")


LINK_LOCAL_V4 = "0000:0000:0000:0000:0000:ffff:a9fe:0307"  # ::ffff:169.254.3.7


def with_link_local_first():
    """NVIDIA's link-local address arrived first: its pair at 2/3, the fabric one's at 4/5."""
    found = hca(index=5)
    found["gids"].update({"2": LINK_LOCAL_V4, "3": LINK_LOCAL_V4})
    return {"rocep1s0f0": found, "roceP2p1s0f0": hca()}


def test_gloo_takes_the_first_address_and_nccl_the_entry_the_index_names():
    ifaces = {**IFACES, "enp1s0f0np0": ["169.254.3.7/16", "10.77.1.15/24"]}
    mine = transport.endpoints(GOOD, with_link_local_first(), ifaces)
    assert mine["used"] == [["gloo", "169.254.3.7"], ["roceP2p1s0f0", "10.77.1.15"],
                            ["rocep1s0f0", "169.254.3.7"]]
    assert "127.0.0.1/8" not in mine["networks"] and "169.254.3.7/16" in mine["networks"]
    unset = transport.endpoints({"GLOO_SOCKET_IFNAME": "enp1s0f0np0"},
                                with_link_local_first(), ifaces)
    assert ["rocep1s0f0", "169.254.3.7"] in unset["used"]  # NCCL keeps the first candidate


def test_an_address_a_peer_cannot_reach_fails_the_group_naming_both_ranks():
    odd = {**IFACES, "enp1s0f0np0": ["169.254.3.7/16", "10.77.1.15/24"]}
    peer = {**IFACES, "enp1s0f0np0": ["10.77.1.16/24"]}
    ranks = {0: transport.endpoints(GOOD, HCAS, peer),
             4: transport.endpoints({**GOOD, "GLOO_SOCKET_IFNAME": ""}, with_link_local_first(), odd)}
    fault = transport.unreachable(ranks)
    assert fault.library == "nccl" and "IBV_WC_RETRY_EXC_ERR" in fault.warning
    assert "dev=rocep1s0f0: rank 4's GID is 169.254.3.7, which rank 0 has no network for" in \
        fault.warning
    gloo = transport.unreachable({0: transport.endpoints(GOOD, HCAS, peer),
                                  2: transport.endpoints({**GOOD, "GLOO_SOCKET_IFNAME": "lo"},
                                                         HCAS, IFACES)})
    assert gloo.library == "gloo" and "rank 0 cannot connect to rank 2 at 127.0.0.1" in gloo.error
    # every node with the link-local address too: all reach each other, as on a real switch
    both = {0: transport.endpoints(GOOD, with_link_local_first(), odd),
            1: transport.endpoints(GOOD, with_link_local_first(), odd)}
    assert transport.unreachable(both) is None


def test_a_netdev_that_lost_its_ipv4_gives_gloo_its_link_local_and_the_group_hangs(tmp_path):
    """Issue 56, item 5: Gloo's lookupAddrForIface takes the first AF_INET or AF_INET6
    address; with the IPv4 one gone it is the IPv6 link-local: no error at the lookup, the
    group waits until the timeout (Gloo's "Unable to find address" only with none)."""
    table = tmp_path / "if_inet6"
    table.write_text("fe80000000000000780d82fffe4ea8b9 03 40 20 80  enp1s0f0np0\n"
                     "00000000000000000000000000000001 01 80 10 80       lo\n")
    ipv6 = transport.local_ipv6(str(table))
    assert ipv6 == {"enp1s0f0np0": ["fe80::780d:82ff:fe4e:a8b9"], "lo": ["::1"]}
    lost = {**IFACES, "enp1s0f0np0": []}
    assert transport._gloo(GOOD, lost, ipv6) is None  # Gloo's lookup finds an address
    mine = transport.endpoints(GOOD, HCAS, lost, ipv6)
    assert ["gloo", "fe80::780d:82ff:fe4e:a8b9"] in mine["used"]
    hang = transport.unreachable({0: transport.endpoints(GOOD, HCAS, IFACES), 2: mine})
    assert hang.library == "gloo-hang"
    assert "timed out connecting to rank 2 at [fe80::780d:82ff:fe4e:a8b9]" in hang.error
    nothing = transport.check(GOOD, HCAS, lost, "10.77.1.11", {})
    assert nothing.library == "gloo" and "Unable to find address for: enp1s0f0np0" in \
        nothing.warning


def test_the_getifaddrs_walk_lists_every_ipv4_address_of_this_namespace():
    found = transport.local_interfaces()
    assert "127.0.0.1/8" in found["lo"]


def test_nccl_socket_ifname_that_matches_nothing_usable():
    fault = check({"NCCL_SOCKET_IFNAME": "=enp1s0"})  # exact match: no such interface
    assert fault.library == "nccl" and fault.warning == "Bootstrap : no socket interface found"
    assert check({"NCCL_SOCKET_IFNAME": "enp1s0"}) is None  # a prefix matches enp1s0f0np0
    assert check({"NCCL_SOCKET_IFNAME": "^lo"}) is None  # exclusion leaves enp1s0f0np0


def test_an_hca_entry_that_matches_no_device_or_is_down_is_skipped_in_silence():
    """Issue 56, item 1: NCCL 2.27.7's ncclIbInit `continue`s past a port that is not
    ACTIVE and a device NCCL_IB_HCA does not select, without a word; with no device left
    it runs NET/Socket. Nothing fails: the rank runs on what is left."""
    missing = {"rocep1s0f0": hca()}
    assert check(hcas=missing) is None
    assert transport.rails(transport.endpoints(GOOD, missing, IFACES)) == [
        ("rocep1s0f0", "10.77.1.15")]
    down = {"rocep1s0f0": hca(), "roceP2p1s0f0": hca("1: DOWN")}
    assert check(hcas=down) is None and transport.network(GOOD, down) == "IB"
    assert [h for h, _ in transport.rails(transport.endpoints(GOOD, down, IFACES))] == [
        "rocep1s0f0"]
    misnamed = {"NCCL_IB_HCA": "rocep1s0f9,roceP2p1s0f9"}  # both entries wrong: TCP
    assert check(misnamed) is None and transport.network({**GOOD, **misnamed}, HCAS) == \
        "Socket"
    assert transport.rails(transport.endpoints({**GOOD, **misnamed}, HCAS, IFACES)) == []
    assert check({"NCCL_IB_DISABLE": "1"}, hcas={}) is None  # sockets only: no HCA needed


def test_the_gid_index_must_be_the_ipv4_mapped_roce_v2_entry_on_every_hca():
    renumbered = {"rocep1s0f0": hca(index=5), "roceP2p1s0f0": hca(index=5)}
    fault = check(hcas=renumbered)  # index 3 is now an IPv6 ULA entry
    assert "IBV_WC_RETRY_EXC_ERR(12)" in fault.warning and "localGidIndex=3" in fault.warning
    assert fault.error.startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert check({"NCCL_IB_GID_INDEX": "5"}, hcas=renumbered) is None
    assert "localGidIndex=2" in check({"NCCL_IB_GID_INDEX": "2"}).warning  # RoCE v1 entry
    empty = check({"NCCL_IB_GID_INDEX": "9"})
    assert empty.warning.startswith("Call to ibv_modify_qp failed with 22 Invalid argument")
    one_off = {"rocep1s0f0": hca(), "roceP2p1s0f0": hca(index=5)}
    assert "dev=roceP2p1s0f0" in check(hcas=one_off).warning


def test_a_kernel_that_fails_memory_registration_fails_nccl_with_enomem():
    """KHO's CMA on the node (gpusimd marks every HCA): NCCL's registration fails."""
    broken = {name: {**hca(), "reg_mr_error": "Cannot allocate memory"} for name in HCAS}
    fault = check(hcas=broken)
    assert fault.warning == "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory"
    assert "ncclSystemError" in fault.error
    assert check({"NCCL_IB_DISABLE": "1"}, hcas=broken) is None  # sockets register nothing


def test_kho_s_registration_fails_only_once_108_gib_is_committed():
    """NV-Kernels#591: init's small buffers pin; at 108 GiB committed, pins fail."""
    limit = 108 * 1024 * 1024
    kho = {name: {**hca(), "reg_mr_error": "Cannot allocate memory", "reg_mr_limit_kb": limit}
           for name in HCAS}
    assert check(hcas=kho) is None  # group init passes
    names = list(HCAS)
    assert transport.registration_fault(names, kho, limit - 1) is None
    fault = transport.registration_fault(names, kho, limit)
    assert fault.warning == "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory"
    assert transport.registration_fault([], kho, limit) is None  # NCCL on sockets: no pins
    assert transport.registration_fault(names, HCAS, 2 * limit) is None  # a sound kernel


def test_gloo_is_judged_before_nccl():
    fault = check({"GLOO_SOCKET_IFNAME": "eth9", "NCCL_IB_GID_INDEX": "9"})
    assert fault.library == "gloo"


TWO_NETWORKS = {"lo": ["127.0.0.1/8"], "enP7s7": ["10.77.1.15/24"],
                "enp1s0f0np0": ["10.77.3.15/24"], "enP2p1s0f0np0": ["10.77.4.15/24"]}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_rank_that_advertises_its_management_address_is_left_waiting(engine):
    """Without *_HOST_IP a rank advertises the default route's address (the management
    network's on a Spark): nothing on the fabric reaches it, and the group hangs."""
    env = {**GOOD}
    fault = transport.advertised_fault(engine, env, TWO_NETWORKS, "10.77.1.15")
    name = transport.HOST_IP[engine]
    assert fault.library == "advertise" and f"{name} unset: 10.77.1.15" in fault.warning
    env[name] = "10.77.3.15"
    assert transport.advertised_fault(engine, env, TWO_NETWORKS, "10.77.1.15") is None
    env[name] = "10.77.1.15"  # set, but to the wrong network: the same hang
    fault = transport.advertised_fault(engine, env, TWO_NETWORKS, "10.77.1.15")
    assert f"{name}=10.77.1.15" in fault.warning and "NCCL_SOCKET_IFNAME=enp1s0f0np0" in fault.warning


def test_the_advertised_address_is_the_libraries_choice_without_a_socket_interface():
    assert transport.advertised_fault("vllm", {}, TWO_NETWORKS, "10.77.1.15") is None


def test_the_roce_path_mtu_follows_the_netdev_mtu_as_the_kernel_derives_it():
    """9000: 4096-byte RDMA payloads, packets of 4156 bytes (no 1500 switch port passes
    them); 1500 (NVIDIA's playbooks): 1024."""
    assert [transport.ib_mtu(m) for m in (9000, 4000, 1500, 1100)] == [4096, 2048, 1024, 512]
    assert transport.ib_mtu(9000) + transport.WRITE_OVERHEAD == 4156


def test_the_rails_a_rank_writes_on_are_the_hcas_of_its_endpoints():
    found = transport.endpoints(GOOD, HCAS, IFACES)
    assert transport.rails(found) == [("roceP2p1s0f0", "10.77.1.15"),
                                      ("rocep1s0f0", "10.77.1.15")]
    assert transport.rails(transport.endpoints({**GOOD, "NCCL_IB_DISABLE": "1"}, HCAS,
                                               IFACES)) == []


def test_a_first_write_that_comes_back_passes_and_one_into_the_void_is_nccls_retry_error():
    sys.path.insert(0, str(SIM_DIR))
    from gpusim.hca import Responders  # the peer node's HCAs, which answer the writes

    hcas = Responders(transport.ROCE_PORT)
    assert hcas.open(1, ["127.0.0.3"]) == ["127.0.0.3"]
    assert transport.first_write("127.0.0.2", "127.0.0.3", 4156, seconds=5)
    hcas.release(1)
    assert not transport.first_write("127.0.0.2", "127.0.0.4", 4156, seconds=0.6)
    fault = transport.write_fault("rocep1s0f0", "10.77.3.11", "10.77.3.12", 4096)
    assert fault.warning.startswith("NET/IB : Got completion from peer 10.77.3.12<4791> with "
                                    "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1)")
    assert "dev=rocep1s0f0" in fault.warning and "path MTU 4096" in fault.warning
    assert fault.error.startswith("torch.distributed.DistBackendError: NCCL error in:")


def test_a_write_refused_at_once_waits_between_tries_instead_of_spinning():
    """A datagram larger than the path MTU is refused by sendto at once; the retries must
    wait the HCA's interval, or a failing rank burns a core for the whole retry window
    (seen starving the rest of a 2-core test run)."""
    import time

    cpu = time.process_time()
    assert not transport.first_write("127.0.0.1", "127.0.0.1", 70000, seconds=1.5)
    assert time.process_time() - cpu < 0.5


def test_nccl_says_what_it_uses_in_its_init_lines_as_2_27_7_does():
    """NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET: the lines sparkrack reads (net_ib.cc,
    net_socket.cc, init.cc, graph/topo.cc of NCCL 2.27.7)."""
    env = {**GOOD, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    assert transport.info_lines(env, HCAS, IFACES) == [
        "NCCL_IB_HCA set to rocep1s0f0,roceP2p1s0f0",
        "NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB "
        "enp1s0f0np0:10.77.1.15<0>",
        "NET/IB : GPU Direct RDMA Disabled for HCA 0 'rocep1s0f0'",
        "NET/IB : GPU Direct RDMA Disabled for HCA 1 'roceP2p1s0f0'",
        "Using network IB"]
    one = transport.info_lines(env, {"rocep1s0f0": hca(), "roceP2p1s0f0": hca("1: DOWN")},
                               IFACES)
    assert one[1] == "NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:10.77.1.15<0>"
    tcp = transport.info_lines({**env, "NCCL_IB_HCA": "rocep1s0f9"}, HCAS, IFACES)
    assert tcp[1:] == ["NET/IB : No device found.",
                       "NET/Socket : Using [0]enp1s0f0np0:10.77.1.15<0>", "Using network Socket"]
    assert transport.info_lines(GOOD, HCAS, IFACES) == []  # NCCL_DEBUG unset: silent
    assert transport.info_lines({**env, "NCCL_DEBUG_SUBSYS": "COLL"}, HCAS, IFACES) == []


def test_the_path_mtu_is_the_smaller_of_both_ends():
    from sparkrack.rehearsal.stub.nccl import Communicator

    mine = {"used": [["rocep1s0f0", "127.0.0.1"]]}  # loopback's MTU: 4096 on its own
    comm = Communicator(0, 2, lambda *a: None, mine)
    assert comm._ring_of({"1": ["127.0.0.2"]}, {}) == [("rocep1s0f0", "127.0.0.1",
                                                        "127.0.0.2", 4096)]
    assert comm._ring_of({"1": ["127.0.0.2"]}, {"127.0.0.2": 1024})[0][3] == 1024


def test_a_rank_on_one_rail_meets_its_peers_on_the_rail_they_share():
    """The twins are on different subnets: rank 2 with only rocep1s0f0 (10.77.3.13) writes
    to the next rank's 10.77.3.x rail, and a two-rail rank writes to it on that rail only."""
    one = [("rocep1s0f0", "10.77.3.13")]
    two = [("roceP2p1s0f0", "10.77.4.12"), ("rocep1s0f0", "10.77.3.12")]
    assert transport.pair_rails(one, ["10.77.4.14", "10.77.3.14"], ["10.77.3.13/24"]) == [
        (("rocep1s0f0", "10.77.3.13"), "10.77.3.14")]
    assert transport.pair_rails(two, ["10.77.3.13"], ["10.77.4.12/24", "10.77.3.12/24"]) == [
        (("rocep1s0f0", "10.77.3.12"), "10.77.3.13")]
    assert transport.pair_rails(one, ["10.77.9.1"], ["10.77.3.13/24"]) == [  # none shared
        (("rocep1s0f0", "10.77.3.13"), "10.77.9.1")]


def endpoints_of(rails: list[tuple[str, str]], socket: str = "enp1s0f0np0") -> dict:
    return {"used": [list(r) for r in rails], "socket": socket,
            "networks": [f"{address}/24" for _, address in rails]}


def test_the_prefill_follows_the_slowest_hop_of_the_ring():
    """Issue 56, item 2: a hop on both twins carries 161 Gbit/s, on one path 98 (public
    reports), on NET/Socket its interface's rate at most (the management port: 10 GbE); the
    configured prefill rate is the rack's on both rails, its all-reduces' share slows."""
    from sparkrack.rehearsal.stub import fabric

    both = {r: endpoints_of([("rocep1s0f0", f"10.77.3.1{r}"), ("roceP2p1s0f0", f"10.77.4.1{r}")])
            for r in range(8)}
    assert fabric.TOKEN_BYTES == 3_354_624  # GLM-5: 78 layers x 2 all-reduces x 6,144 x 2 B x 7/4
    assert fabric.ring_gbit(both) == 161.0
    one = {**both, 2: endpoints_of([("rocep1s0f0", "10.77.3.12")])}
    assert fabric.ring_gbit(one) == 98.0
    assert fabric.ring_gbit({**both, 2: endpoints_of([])}) == 98.0  # TCP on the fabric netdev
    mgmt = {**both, 2: endpoints_of([], socket="enP7s7")}
    assert fabric.ring_gbit(mgmt) == 10.0
    assert fabric.prefill_s(8000, 4000, 161.0) == 2.0  # as configured on both rails
    fabric_part = 8000 * fabric.TOKEN_BYTES * 8 / 161e9  # 1.33 s of the 2 s
    assert abs(fabric.prefill_s(8000, 4000, 98.0) - (2.0 + fabric_part * (161 / 98 - 1))) < 1e-9
    assert 2.8 < fabric.prefill_s(8000, 4000, 98.0) < 2.9
    assert 22 < fabric.prefill_s(8000, 4000, 10.0) < 23
    assert fabric.prefill_s(8000, 1e9, 98.0) == 8000 / 1e9 * 161 / 98  # fabric-bound
    assert fabric.prefill_s(10, 0, 98.0) == 0.0
    assert fabric.socket_ifname({"NCCL_SOCKET_IFNAME": "enP7s7"},
                                {"lo": ["127.0.0.1/8"], "enP7s7": ["10.77.1.13/24"]}) == "enP7s7"


def test_a_port_gone_down_under_the_ring_is_warned_of_and_fails_its_writes_after_retries(
        monkeypatch, capsys):
    """Issue 56, item 4: NCCL's async thread warns of the port error at once; the rail's
    writes go unacknowledged and fail after the HCA's retries, unless the port is back."""
    from sparkrack.rehearsal.stub import nccl
    from sparkrack.rehearsal.stub.nccl import Communicator

    monkeypatch.setattr(nccl, "PORT_POLL_S", 0.05)
    monkeypatch.setattr(transport, "RETRY_WINDOW_S", 0.6)
    state = {"rocep1s0f0": hca(), "roceP2p1s0f0": hca()}
    comm = Communicator(2, 8, lambda *a: None, {}, ports=lambda: dict(state))
    comm.ring = [("rocep1s0f0", "10.77.3.13", "10.77.3.14", 4096),
                 ("roceP2p1s0f0", "10.77.4.13", "10.77.4.14", 4096)]
    import threading
    import time
    threading.Thread(target=comm._watch_ports, daemon=True).start()
    state["roceP2p1s0f0"] = hca("1: DOWN")
    deadline = time.monotonic() + 5
    while "roceP2p1s0f0" not in comm.down and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "NCCL WARN NET/IB : roceP2p1s0f0:1 Got async error event: port error" in \
        capsys.readouterr().out
    monkeypatch.setattr(transport, "first_write", lambda *a, **k: True)  # rail 1's acked
    began = time.monotonic()
    fault = comm.writes()
    assert time.monotonic() - began >= 0.6  # the retries, then the error
    assert fault.warning.startswith("NET/IB : Got completion from peer 10.77.4.14<4791> with "
                                    "status=IBV_WC_RETRY_EXC_ERR(12)")
    assert "dev=roceP2p1s0f0" in fault.warning and "(roceP2p1s0f0's port is down)" in \
        fault.warning
    threading.Timer(0.2, lambda: state.update(roceP2p1s0f0=hca())).start()
    assert comm.writes() is None  # back within the retry window: NCCL carries on
    assert "Got async error event: port active" in capsys.readouterr().out
