"""roce-tree's fake /sys/class/infiniband and ibdev2netdev reading it, as a Spark shows them."""

import os
import subprocess
from pathlib import Path

ROCE_DIR = Path(__file__).resolve().parents[3] / "sparkrack" / "rehearsal" / "sim" / "roce"
TWINS = ["--hca", "rocep1s0f0=enp1s0f0np0", "--hca", "roceP2p1s0f0=enP2p1s0f0np0"]


def roce_tree(dest: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROCE_DIR / "roce-tree"), str(dest), *args], capture_output=True,
                          text=True, timeout=10)


def ibdev2netdev(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROCE_DIR / "ibdev2netdev")], capture_output=True, text=True,
                          timeout=10, env={**os.environ, "SYS_CLASS_INFINIBAND": str(root)})


def port_file(root: Path, hca: str, relative: str) -> str:
    return (root / hca / "ports" / "1" / relative).read_text().strip()


def test_ibdev2netdev_prints_both_twins_in_the_real_format(tmp_path):
    assert roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11").returncode == 0
    out = ibdev2netdev(tmp_path)
    assert out.stdout == ("roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)\n"
                          "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)\n")


def test_port_attributes_read_as_in_sysfs(tmp_path):
    roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11")
    assert port_file(tmp_path, "rocep1s0f0", "state") == "4: ACTIVE"
    assert port_file(tmp_path, "rocep1s0f0", "phys_state") == "5: LinkUp"
    assert port_file(tmp_path, "rocep1s0f0", "link_layer") == "Ethernet"
    assert port_file(tmp_path, "rocep1s0f0", "rate") == "200 Gb/sec (2X NDR)"
    guid = (tmp_path / "rocep1s0f0" / "node_guid").read_text().strip()
    assert len(guid.split(":")) == 4 and all(len(part) == 4 for part in guid.split(":"))


def test_a_link_on_a_breakout_reads_its_own_rate(tmp_path):
    """The rate the switch negotiated, per HCA, as mlx5 prints it; the rest at 200G."""
    done = roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11",
                     "--rate=roceP2p1s0f0=100 Gb/sec (2X HDR)")
    assert done.returncode == 0, done.stderr
    assert port_file(tmp_path, "roceP2p1s0f0", "rate") == "100 Gb/sec (2X HDR)"
    assert port_file(tmp_path, "rocep1s0f0", "rate") == "200 Gb/sec (2X NDR)"
    wrong = roce_tree(tmp_path, *TWINS, "--rate=rocep1s0f1=100 Gb/sec (2X HDR)")
    assert wrong.returncode == 2 and "rocep1s0f1 is not one of the --hca names" in wrong.stderr


def test_default_layout_puts_the_ipv4_roce_v2_gid_at_index_3(tmp_path):
    roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11")
    for index, kind in enumerate(["IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"]):
        assert port_file(tmp_path, "roceP2p1s0f0", f"gid_attrs/types/{index}") == kind
        assert port_file(tmp_path, "roceP2p1s0f0", f"gid_attrs/ndevs/{index}") == "enP2p1s0f0np0"
    assert port_file(tmp_path, "roceP2p1s0f0", "gids/0").startswith("fe80:0000:0000:0000:")
    assert port_file(tmp_path, "roceP2p1s0f0", "gids/3") == "0000:0000:0000:0000:0000:ffff:0a4d:010b"


def test_renumbered_firmware_moves_the_ipv4_gid_to_index_5(tmp_path):
    roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11", "--gid-index", "5")
    mapped = "0000:0000:0000:0000:0000:ffff:0a4d:010b"
    assert port_file(tmp_path, "rocep1s0f0", "gids/5") == mapped
    assert port_file(tmp_path, "rocep1s0f0", "gid_attrs/types/5") == "RoCE v2"
    assert port_file(tmp_path, "rocep1s0f0", "gids/4") == mapped
    assert port_file(tmp_path, "rocep1s0f0", "gid_attrs/types/4") == "IB/RoCE v1"
    assert port_file(tmp_path, "rocep1s0f0", "gids/3") != mapped
    assert port_file(tmp_path, "rocep1s0f0", "gids/6") == "0000:0000:0000:0000:0000:0000:0000:0000"
    assert not (tmp_path / "rocep1s0f0" / "ports/1/gid_attrs/types/6").exists()


def test_each_twin_gets_its_own_address_when_given_per_hca(tmp_path):
    roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11", "--ipv4", "10.77.2.11")
    assert port_file(tmp_path, "roceP2p1s0f0", "gids/3").endswith("ffff:0a4d:020b")


def test_missing_hca_is_left_out_and_down_hca_shows_down(tmp_path):
    roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11")
    roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11", "--missing", "roceP2p1s0f0",
              "--down", "rocep1s0f0")
    assert not (tmp_path / "roceP2p1s0f0").exists()
    assert ibdev2netdev(tmp_path).stdout == "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)\n"
    assert port_file(tmp_path, "rocep1s0f0", "state") == "1: DOWN"


V2 = "RoCE v2"


def ipv4_v2_entries(root: Path, hca: str) -> dict[int, str]:
    """{index: mapped GID} of the port's RoCE v2 IPv4-mapped entries."""
    types = root / hca / "ports/1/gid_attrs/types"
    return {int(t.name): port_file(root, hca, f"gids/{t.name}") for t in types.iterdir()
            if t.read_text().strip() == V2 and ":ffff:" in port_file(root, hca, f"gids/{t.name}")}


def test_an_even_boot_index_puts_the_v2_entry_there(tmp_path):
    # real units were seen with the RoCE v2 IPv4 entry at 6 after a reboot
    assert roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11", "--gid-index", "6").returncode == 0
    assert list(ipv4_v2_entries(tmp_path, "rocep1s0f0")) == [6]
    assert port_file(tmp_path, "rocep1s0f0", "gid_attrs/types/4") == "IB/RoCE v1"
    assert port_file(tmp_path, "rocep1s0f0", "gids/4") == port_file(tmp_path, "rocep1s0f0", "gids/6")
    out = roce_tree(tmp_path, *TWINS, "--ipv4", "10.77.1.11", "--gid-index", "2")
    assert out.returncode == 2 and ">= 3" in out.stderr


def test_every_address_gets_a_pair_and_a_removed_one_frees_its_slots(tmp_path):
    slots = str(tmp_path / "slots.json")
    tree = tmp_path / "ib"
    fabric, link_local = "0000:0000:0000:0000:0000:ffff:0a4d:030b", "0000:0000:0000:0000:0000:ffff:a9fe:0307"
    # the link-local address arrived first: its pair at 2/3, the fabric address's at 4/5
    roce_tree(tree, *TWINS, "--ipv4", "169.254.3.7,10.77.3.11", "--slots", slots)
    assert ipv4_v2_entries(tree, "rocep1s0f0") == {3: link_local, 5: fabric}
    # the link-local address removed: its slots empty, the fabric address keeps 5
    roce_tree(tree, *TWINS, "--ipv4", "10.77.3.11", "--slots", slots)
    assert ipv4_v2_entries(tree, "rocep1s0f0") == {5: fabric}
    assert port_file(tree, "rocep1s0f0", "gids/3") == "0000:0000:0000:0000:0000:0000:0000:0000"
    # a new address takes the lowest free slots
    roce_tree(tree, *TWINS, "--ipv4", "10.77.3.11,10.77.9.11", "--slots", slots)
    assert list(ipv4_v2_entries(tree, "rocep1s0f0")) == [3, 5]
    # a new boot lays the table out afresh: the first address at the boot's index
    roce_tree(tree, *TWINS, "--ipv4", "10.77.3.11", "--slots", slots, "--gid-index", "5")
    assert ipv4_v2_entries(tree, "rocep1s0f0") == {5: fabric}


def test_ibdev2netdev_prints_nothing_without_rdma_devices(tmp_path):
    out = ibdev2netdev(tmp_path / "absent")
    assert (out.returncode, out.stdout) == (0, "")


def test_a_rewrite_never_shows_a_half_written_or_missing_hca(tmp_path):
    """The follower rewrites the tree on every carrier or address change; a reader (fact
    gathering, the engines' GID lookup) must see the old device or the new one, whole."""
    import threading

    tree = tmp_path / "infiniband"
    assert roce_tree(tree, *TWINS, "--ipv4", "10.77.1.11").returncode == 0
    seen, stop = [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.append(port_file(tree, "rocep1s0f0", "gids/254"))
            except OSError as error:
                seen.append(repr(error))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(12):  # down and up again, as a cable pulled and plugged
            down = ["--down", "rocep1s0f0"] if n % 2 else []
            assert roce_tree(tree, *TWINS, "--ipv4", "10.77.1.11", *down).returncode == 0
    finally:
        stop.set()
        reader.join()
    assert seen and set(seen) == {"0000:0000:0000:0000:0000:0000:0000:0000"}, set(seen)
    assert sorted(os.listdir(tmp_path)) == ["infiniband", "infiniband.staging"]
    assert os.listdir(tmp_path / "infiniband.staging") == []  # nothing left behind


def test_the_four_functions_share_one_sys_image_guid_and_read_the_public_firmware(tmp_path):
    """As public Spark captures show (NV-Kernels#590): one adapter, one sys_image_guid for
    its four functions, each with its own node_guid; firmware 28.45.4028, part 4129."""
    four = [*TWINS, "--hca", "rocep1s0f1=enp1s0f1np1", "--hca", "roceP2p1s0f1=enP2p1s0f1np1"]
    roce_tree(tmp_path / "a", *four, "--ipv4", "10.77.3.11", "--seed", "spark-01")
    roce_tree(tmp_path / "b", *four, "--ipv4", "10.77.3.12", "--seed", "spark-02")
    functions = ["rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1"]

    def read(node: str, name: str) -> list[str]:
        return [(tmp_path / node / f / name).read_text().strip() for f in functions]

    assert len(set(read("a", "sys_image_guid"))) == 1
    assert read("a", "sys_image_guid") != read("b", "sys_image_guid")
    assert len(set(read("a", "node_guid"))) == 4
    assert set(read("a", "fw_ver")) == {"28.45.4028"}
    assert set(read("a", "hca_type")) == {"MT4129"}
