"""Provisioning facts: the gather script's argv and the parsers, on recorded output."""

import base64
import hashlib
import json
import subprocess

from sparkrack.facts import docker, files, roce, systemd
from sparkrack.facts import provision as g
from sparkrack.facts.queries import PYTHON
from sparkrack.facts.queries import argv as gather_argv
from sparkrack.fleet import quote_argv

# Recorded from a rehearsal node (spark-01) after a provision; the file content shortened.
NCCL = b"NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0\nNCCL_IB_GID_INDEX=3\n"
RECORDED = f"""@@base
7614755a-9783-4cff-9ac6-84709a6ac516
1796036605.596217102

@@0 f
stat regular file|644|root|root|{len(NCCL)}|1796036577.896018416
content {base64.b64encode(NCCL).decode()}

@@1 f
stat directory|755|root|root|4096|1796036577.899529785
entry nccl.env
entry sglang.env
entry $'odd\\nname'

@@2 f
missing

@@3 u
Result=success
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=exited
FragmentPath=/etc/systemd/system/sparkrack-clock-cap.service
UnitFileState=enabled
NeedDaemonReload=no

@@4 r
present
state 4: ACTIVE
netdev enp1s0f0np0
types
0:IB/RoCE v1
1:RoCE v2
2:IB/RoCE v1
3:RoCE v2
gids
0:fe80:0000:0000:0000:ba3f:d2ff:fea2:1a04
1:fe80:0000:0000:0000:ba3f:d2ff:fea2:1a04
2:0000:0000:0000:0000:0000:ffff:0a4d:010b
3:0000:0000:0000:0000:0000:ffff:0a4d:010b

@@5 r

@@6 x
rc 1

@@7 i
rc 0
sparkrack-test/vllm:provision sha256:09f4e428a71dd1d4361df1c4b55911eec088ccbfebce4401f437b72ebe5caa7d
lmsysorg/sglang:v0.5.22-cu130 sha256:923d4d03bccc1202b30eb81e5c7e457b457819821c97c86382b7e81d9c2e7844
<none>:<none> sha256:1111111111111111111111111111111111111111111111111111111111111111

@@8 n
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs
    lo:   30215     276    0    0    0     0          0         0    30215     276    0
enp1s0f0np0: 3610428    2784    0    0    0     0          0         0  3626572    2393
enP2p1s0f0np0:    1076      14    0    0    0     0          0         0     1076      14
"""
QUERIES = [files.file_query("/etc/sparkrack/nccl.env"), files.file_query("/etc/sparkrack"),
           files.file_query("/nope"), systemd.unit_query("sparkrack-clock-cap.service"),
           roce.roce_query("rocep1s0f0"), roce.roce_query("mlx5_9"),
           g.guard_query(["test", "-e", "/nope"]), docker.IMAGES, roce.NETDEVS]


def test_recorded_output_parses():
    facts = g.parse_facts(RECORDED, QUERIES)
    assert facts.boot_id == "7614755a-9783-4cff-9ac6-84709a6ac516"
    env = facts.file("/etc/sparkrack/nccl.env")
    assert (env.exists, env.type, env.mode, env.owner, env.group) == (True, "file", "644",
                                                                      "root", "root")
    assert env.content == NCCL and env.sha256 == hashlib.sha256(NCCL).hexdigest()
    assert env.mtime == "1796036577.896018416"
    directory = facts.file("/etc/sparkrack")
    assert directory.type == "directory"
    assert directory.entries == ("nccl.env", "sglang.env", "odd\nname")
    assert not facts.file("/nope").exists and not facts.file("/never-asked").exists
    unit = facts.unit("sparkrack-clock-cap.service")
    assert (unit.load, unit.active, unit.result, unit.enabled, unit.is_enabled) == (
        "loaded", "active", "success", "enabled", True)
    assert not unit.need_reload and unit.exit_status == 0
    assert facts.unit("other.service").load == "not-found"
    assert facts.roce.hcas["rocep1s0f0"].ipv4_gid_index == 3
    assert facts.roce.missing == ["mlx5_9"]
    assert facts.roce.choose({"rocep1s0f0": "10.77.1.11"}).index == 3
    assert facts.guards[("test", "-e", "/nope")] == 1
    assert facts.images == {
        "sparkrack-test/vllm:provision": "sha256:09f4e428a71dd1d4361df1c4b55911eec088ccbfebce4401f437b72ebe5caa7d",
        "lmsysorg/sglang:v0.5.22-cu130": "sha256:923d4d03bccc1202b30eb81e5c7e457b457819821c97c86382b7e81d9c2e7844"}
    assert facts.netdevs == ("lo", "enp1s0f0np0", "enP2p1s0f0np0")


def _hca(types: dict, gids: dict) -> str:
    lines = ["present", "state 4: ACTIVE", "netdev enp1s0f0np0", "types"]
    lines += [f"{i}:{t}" for i, t in types.items()]
    lines += ["gids"] + [f"{i}:{v}" for i, v in gids.items()]
    return "\n".join(lines)


LL = "fe80:0000:0000:0000:ba3f:d2ff:fea2:1a04"
ULA = "fd77:0000:0000:0000:ba3f:d2ff:fea2:1a04"
V4 = "0000:0000:0000:0000:0000:ffff:0a4d:010b"


def test_gid_index_5_after_renumbering():
    # the firmware put IPv6 pairs first: the IPv4-mapped RoCE v2 entry moves to 5
    hca = roce.parse_hca(_hca({0: "IB/RoCE v1", 1: "RoCE v2", 2: "IB/RoCE v1", 3: "RoCE v2",
                            4: "IB/RoCE v1", 5: "RoCE v2"},
                           {0: LL, 1: LL, 2: ULA, 3: ULA, 4: V4, 5: V4}).splitlines())
    assert hca.ipv4_gid_index == 5


def test_unreadable_type_entries_are_skipped():
    # real kernels raise EINVAL reading types/<n> of empty entries: grep -s leaves them out
    hca = roce.parse_hca(_hca({0: "IB/RoCE v1", 1: "RoCE v2", 3: "RoCE v2"},
                           {0: LL, 1: LL, 2: V4, 3: V4}).splitlines())
    assert hca.ipv4_gid_index == 3


def test_roce_v1_only_or_no_ipv4_gives_no_index():
    v1 = roce.parse_hca(_hca({0: "IB/RoCE v1", 2: "IB/RoCE v1"}, {0: LL, 2: V4}).splitlines())
    no_v4 = roce.parse_hca(_hca({0: "IB/RoCE v1", 1: "RoCE v2"}, {0: LL, 1: LL}).splitlines())
    assert v1.ipv4_gid_index is None and no_v4.ipv4_gid_index is None
    choice = roce.RoceFacts({"a": no_v4}).choose({"a": "10.77.1.11"})
    assert choice.index is None and choice.missing == ["a (10.77.1.11)"]


def test_hcas_that_disagree_have_no_common_index():
    three = roce.parse_hca(_hca({3: "RoCE v2"}, {3: V4}).splitlines())
    five = roce.parse_hca(_hca({5: "RoCE v2"}, {5: V4}).splitlines())
    choice = roce.RoceFacts({"a": three, "b": five}).choose({"a": "10.77.1.11", "b": "10.77.1.11"})
    assert choice.conflict and choice.index is None
    assert choice.indexes == {"a": 3, "b": 5}


LINK_LOCAL_V4 = "0000:0000:0000:0000:0000:ffff:a9fe:0307"  # 169.254.3.7


def test_the_gid_is_chosen_by_address_not_by_position():
    # NVIDIA's 40-cx7.yaml put a link-local address on the netdev first: its pair is at
    # 2/3, the fabric address's at 4/5. The lowest IPv4 entry is the wrong address's.
    hca = roce.parse_hca(_hca({0: "IB/RoCE v1", 1: "RoCE v2", 2: "IB/RoCE v1", 3: "RoCE v2",
                               4: "IB/RoCE v1", 5: "RoCE v2"},
                              {0: LL, 1: LL, 2: LINK_LOCAL_V4, 3: LINK_LOCAL_V4, 4: V4,
                               5: V4}).splitlines())
    assert hca.ipv4_gids == {3: "169.254.3.7", 5: "10.77.1.11"}
    choice = roce.RoceFacts({"rocep1s0f0": hca}).choose({"rocep1s0f0": "10.77.1.11"})
    assert choice.index == 5 and not choice.conflict
    assert choice.others_text == "; other IPv4 GIDs: 169.254.3.7 on rocep1s0f0"


def test_absent_hcas_are_left_to_their_own_check():
    present = roce.parse_hca(_hca({3: "RoCE v2"}, {3: V4}).splitlines())
    choice = roce.RoceFacts({"a": present, "b": roce.HcaFacts()}).choose(
        {"a": "10.77.1.11", "b": "10.77.4.11"})
    assert choice.index == 3 and choice.indexes == {"a": 3}


def test_fabric_addresses_follow_the_socket_interface_or_the_first_function():
    hcas = ["rocep1s0f0", "roceP2p1s0f0"]
    assert roce.fabric_addresses(hcas, "enp1s0f0np0", "10.77.3.11", "10.77.4.11") == {
        "rocep1s0f0": {"netdev": "enp1s0f0np0", "address": "10.77.3.11"},
        "roceP2p1s0f0": {"netdev": "enP2p1s0f0np0", "address": "10.77.4.11"}}
    # NCCL's socket bootstrap on the management port: roce_addr stays on the first function
    on_management = roce.fabric_addresses(hcas, "enP7s7", "10.77.3.11", None)
    assert on_management["rocep1s0f0"]["address"] == "10.77.3.11"
    assert on_management["roceP2p1s0f0"]["address"] is None
    # cabled on the twin's path: the socket interface's function carries roce_addr
    assert roce.fabric_addresses(hcas, "enP2p1s0f0np0", "10.77.3.11", None)[
        "roceP2p1s0f0"]["address"] == "10.77.3.11"


def test_docker_down_is_an_error_not_an_empty_list():
    message = ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
               "Is the docker daemon running?")
    images, error = docker.parse_images(["rc 1", message])
    assert images is None and error.startswith("Cannot connect")


def test_large_files_come_back_as_hash_only():
    digest = "ab" * 32
    facts = files.parse_file(["stat regular file|644|root|root|999999|1.0", f"sha256 {digest}"])
    assert facts.content is None and facts.sha256 == digest and facts.size == 999999


def test_values_are_positional_arguments_never_script_text():
    evil = "/etc/x; touch /tmp/pwned $(reboot) `id`"
    argv = gather_argv([files.file_query(evil), systemd.unit_query("a;b.service"),
                          roce.roce_query("$(x)"), g.guard_query(["test", "-e", evil])])
    script = argv[len(PYTHON)]
    assert tuple(argv[:len(PYTHON)]) == PYTHON
    assert argv[5::2] == ["file_section", "unit_section", "hca_section", "guard_section"]
    values = [json.loads(v) for v in argv[6::2]]
    assert (values[0][0], values[2], values[3]) == (evil, ["$(x)"], [["test", "-e", evil]])
    assert evil not in script and "$(x)" not in script


def test_queries_are_deduplicated():
    argv = gather_argv([files.file_query("/a"), files.file_query("/a"), docker.IMAGES, docker.IMAGES])
    assert argv[5:] == ["file_section", json.dumps(["/a", files.CONTENT_LIMIT]),
                        "images_section", "[]"]


def test_script_runs_locally_on_odd_paths(tmp_path):
    odd = tmp_path / "a; touch pwned $(touch pwned2) `touch pwned3`"
    odd.write_bytes(b"x=1\n")
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "@@0 f").write_text("forged header")
    (folder / "line\nbreak").write_text("")
    queries = [files.file_query(str(odd)), files.file_query(str(folder)),
               g.guard_query(["test", "-e", str(odd)]), files.file_query(str(tmp_path / "none"))]
    done = subprocess.run(["sh", "-c", quote_argv(gather_argv(queries))], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=30)
    facts = g.parse_facts(done.stdout, queries)
    assert facts.file(str(odd)).content == b"x=1\n"
    assert set(facts.file(str(folder)).entries) == {"@@0 f", "line\nbreak"}
    assert facts.guards[("test", "-e", str(odd))] == 0
    assert not facts.file(str(tmp_path / "none")).exists
    assert not list(tmp_path.glob("pwned*"))


def test_normalize_ref():
    assert docker.normalize_ref("docker.io/library/busybox") == "busybox:latest"
    assert docker.normalize_ref("lmsysorg/sglang:v0.5.22-cu130") == "lmsysorg/sglang:v0.5.22-cu130"
    assert docker.normalize_ref("docker.io/vllm/vllm-openai:v0.33.0") == "vllm/vllm-openai:v0.33.0"
    assert docker.normalize_ref("registry:5000/x") == "registry:5000/x:latest"


def test_node_script_reads_files_hcas_and_guards(tmp_path, monkeypatch):
    from sparkrack.remote import gather as node

    empty, big, link = tmp_path / "empty", tmp_path / "big", tmp_path / "link"
    empty.write_bytes(b"")
    big.write_bytes(b"y" * 100)
    link.symlink_to(big)
    port = tmp_path / "ib" / "mlx5_0" / "ports" / "1"
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "gids").mkdir()
    (port / "state").write_text("4: ACTIVE\n")
    (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    (port / "gid_attrs" / "types" / "4").mkdir()  # unreadable, as sysfs gives EINVAL
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:0a4d:010b\n")
    (port / "gids" / "4").write_text(roce.EMPTY_GID + "\n")
    (tmp_path / "ib" / "mlx5_0" / "device" / "net" / "enp1s0f0np0").mkdir(parents=True)
    monkeypatch.setattr(node, "INFINIBAND", str(tmp_path / "ib"))
    # big: over its content limit, a hash
    queries = [files.file_query(str(empty)), files.file_query(str(big), 10),
               files.file_query(str(link)),
               roce.roce_query("mlx5_0"), roce.roce_query("mlx5_9"), roce.FUNCTIONS,
               g.guard_query(["no-such-command-here"]), g.guard_query(["false"])]
    args = gather_argv(queries)[len(PYTHON) + 1:]
    lines = []
    monkeypatch.setattr(node.sys.stdout, "write", lines.append)
    node.main(args)
    facts = g.parse_facts("".join(lines), queries)
    assert facts.file(str(empty)).type == "file" and facts.file(str(empty)).content == b""
    assert facts.file(str(big)).content is None
    assert facts.file(str(big)).sha256 == hashlib.sha256(b"y" * 100).hexdigest()
    assert facts.file(str(link)).type == "link"
    hca = facts.roce.hcas["mlx5_0"]
    assert (hca.state, hca.netdevs, hca.types) == ("4: ACTIVE", ("enp1s0f0np0",), {3: "RoCE v2"})
    assert hca.gids == {3: "0000:0000:0000:0000:0000:ffff:0a4d:010b"} and hca.ipv4_gid_index == 3
    assert facts.roce.missing == ["mlx5_9"]
    assert facts.functions == {"mlx5_0": roce.Function("mlx5_0", ("enp1s0f0np0",), "4: ACTIVE")}
    assert not facts.netdev_down("enp1s0f0np0") and facts.functions["mlx5_0"].up
    assert facts.guards[("no-such-command-here",)] == 127 and facts.guards[("false",)] == 1


def test_node_script_lists_images_from_the_docker_socket(tmp_path, monkeypatch):
    import json
    import socket
    import threading

    from sparkrack.remote import dockerd

    path = str(tmp_path / "docker.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    asked = []

    def answer():
        conn, _ = server.accept()
        with conn:
            asked.append(conn.recv(4096))
            body = json.dumps([{"Id": "sha256:" + "a" * 64, "RepoTags": ["x/y:1", "x/y:latest"]},
                               {"Id": "sha256:" + "b" * 64, "RepoTags": None}]).encode()
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)

    thread = threading.Thread(target=answer)
    thread.start()
    monkeypatch.setattr(dockerd, "DOCKER_SOCKET", path)
    lines = dockerd.images_section()
    thread.join(5)
    server.close()
    assert asked[0].startswith(b"GET /images/json HTTP/1.0\r\n")
    images, error = docker.parse_images(lines)
    assert error is None and images == {"x/y:1": "sha256:" + "a" * 64,
                                        "x/y:latest": "sha256:" + "a" * 64}
    monkeypatch.setattr(dockerd, "DOCKER_SOCKET", str(tmp_path / "none.sock"))
    images, error = docker.parse_images(dockerd.images_section())
    assert images is None and error.startswith("Cannot connect to the Docker daemon")
