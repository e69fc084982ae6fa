"""The transfer code run for real on this machine: the node scripts as they are shipped
(sparkrack/remote, self-contained through remote.script), relays chained on loopback
addresses (a fake `docker` for images, temporary directories for model files), the
stager's questions, and the manifest (pure)."""

import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from freeport import free_port
from provision_helpers import write_image_tar

from sparkrack import remote
from sparkrack.transfer.manifest import ManifestError, parse_manifest, rack_manifest

MANIFEST = "sparkrack-manifest.sha256"




def relay(settings, *, token="tok", data=b"", env=None):
    """One relay as a node runs it: the token and settings on stdin (its argv, which `ps`
    shows everyone, holds neither), then the stream for a stdin source."""
    process = subprocess.Popen([sys.executable, "-c", remote.script("relay")], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdin.write(token.encode() + b"\n" + json.dumps(settings).encode() + b"\n" + data)
    process.stdin.close()
    return process


def finish(*processes):
    out = []
    for p in processes:
        p.wait(timeout=60)
        out.append((p.returncode, json.loads(p.stdout.read() or b"{}"), p.stderr.read()))
    return out


def stager(*args, stdin=None):
    done = subprocess.run([sys.executable, "-c", remote.script("stager"), *map(str, args)],
                          input=json.dumps(stdin) if stdin is not None else "",
                          capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout)


def test_scripts_are_self_contained_and_the_handshake_is_written_once():
    text = remote.script("relay")
    compile(text, "relay", "exec")
    assert "from ." not in text and text.count("def listen(") == 1
    assert text.count("def sha_of(") == 1 and "def sha_of(" in remote.script("stager")
    argv = remote.argv("/usr/bin/python3", "stager", "sizes", "/m")
    assert argv[:2] == ["/usr/bin/python3", "-c"] and argv[3:] == ["sizes", "/m"]


FAKE_DOCKER = """#!/bin/sh
# a stand-in for docker: `save` prints the tar, `load` stores what it reads
case $1 in
save) cat "$FAKE_TAR" ;;
load) cat > "$FAKE_OUT"; echo "Loaded image: x" ;;
esac
"""


@pytest.mark.timeout(60)
def test_image_chain_moves_the_stream_once_and_every_hop_loads_it(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    tar = tmp_path / "image.tar"
    write_image_tar(tar, "t/s:1", 3 << 20)
    port = free_port()

    def env(out):
        return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_TAR": str(tar),
                "FAKE_OUT": str(out)}

    last = relay({"from": ["recv", "127.0.0.3", port], "sink": ["load"], "next": None},
                 env=env(tmp_path / "c.tar"))
    middle = relay({"from": ["recv", "127.0.0.2", port], "sink": ["load"],
                    "next": ["127.0.0.3", port]}, env=env(tmp_path / "b.tar"))
    for _ in range(50):  # an intruder without the token is turned away
        try:
            with socket.create_connection(("127.0.0.2", port)) as s:
                s.sendall(b"wrong-token 0\n")
            break
        except OSError:
            time.sleep(0.1)
    source = relay({"from": ["save", "t/s:1"], "sink": ["none"], "next": ["127.0.0.2", port]},
                   env=env(tmp_path / "unused"))
    outcomes = finish(source, middle, last)
    assert [o[0] for o in outcomes] == [0, 0, 0], outcomes
    assert (tmp_path / "b.tar").read_bytes() == tar.read_bytes()
    assert (tmp_path / "c.tar").read_bytes() == tar.read_bytes()
    assert outcomes[0][1]["bytes"] == tar.stat().st_size


def model(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    data = {"config.json": b"{}\n", "sub/w1.bin": os.urandom(300_000),
            "w2.bin": os.urandom(200_000)}
    for name, blob in data.items():
        (src / name).write_bytes(blob)
    return src, data, {n: [hashlib.sha256(b).hexdigest(), len(b)] for n, b in data.items()}


@pytest.mark.timeout(60)
def test_a_file_chain_writes_what_each_hop_needs_resumes_partials_and_caches_hashes(tmp_path):
    src, data, manifest = model(tmp_path)
    one, two, cache = tmp_path / "one", tmp_path / "two", tmp_path / "cache.json"
    (one / "sub").mkdir(parents=True)
    (one / "sub" / ".w1.bin.sparkrack-partial").write_bytes(data["sub/w1.bin"][:123_456])
    (one / "config.json").write_bytes(b"{}\n")
    two.mkdir()
    (two / "w2.bin").write_bytes(data["w2.bin"])
    files = [[n, s, z] for n, (s, z) in sorted(manifest.items())]
    code, checked = stager("check", one, cache, 0, 1, stdin=files)
    assert checked["files"]["config.json"]["state"] == "ok"
    assert checked["files"]["sub/w1.bin"] == {"state": "need", "offset": 123_456, "hashed": False,
                                              "why": "missing; partial 123456 of 300000 bytes"}
    # one needs w1 from 123456 and w2; two needs config.json and w1 from 0: the stream
    # carries w1 from 0 once, and each hop keeps its own
    plan = [["config.json", 3, 0], ["sub/w1.bin", 300_000, 0], ["w2.bin", 200_000, 0]]
    port = free_port()
    want_one = {n: manifest[n] for n in ("sub/w1.bin", "w2.bin")}
    want_two = {n: manifest[n] for n in ("config.json", "sub/w1.bin")}
    last = relay({"from": ["recv", "127.0.0.3", port],  # its own cache, as on its own node
                  "sink": ["files", str(two), str(tmp_path / "two.json"), want_two],
                  "next": None})
    first = relay({"from": ["stdin"], "sink": ["files", str(one), str(cache), want_one],
                   "next": ["127.0.0.3", port]},
                  data=b"".join(_local_stream(src, plan)))
    (c1, r1, e1), (c2, r2, e2) = finish(first, last)
    assert (c1, c2) == (0, 0), (r1, e1, r2, e2)
    for folder in (one, two):
        for name in ("config.json", "sub/w1.bin"):
            assert (folder / name).read_bytes() == data[name]
    assert (one / "w2.bin").read_bytes() == data["w2.bin"]
    files_one = r1["sink"]["result"]["files"]
    assert files_one["sub/w1.bin"]["state"] == "ok" and files_one["sub/w1.bin"]["resumed_from"] == 0
    assert r2["sink"]["result"]["files"]["config.json"]["state"] == "ok"
    assert not list(one.rglob("*.sparkrack-partial"))
    code, again = stager("check", one, cache, 0, 1, stdin=files)
    assert all(e["state"] == "ok" and not e["hashed"] for e in again["files"].values())
    assert again["hashed_bytes"] == 0  # the relay recorded what it verified
    # resuming: the stream starts at the partial's end; the partial's bytes are kept
    (one / "w2.bin").unlink()
    (one / ".w2.bin.sparkrack-partial").write_bytes(data["w2.bin"][:150_000])
    code, need = stager("check", one, cache, 0, 1, stdin=files)
    assert need["files"]["w2.bin"]["offset"] == 150_000
    done = finish(relay({"from": ["stdin"], "sink": ["files", str(one), str(cache),
                                                     {"w2.bin": manifest["w2.bin"]}],
                         "next": None},
                        data=b"".join(_local_stream(src, [["w2.bin", 200_000, 150_000]]))))
    assert done[0][0] == 0 and done[0][1]["sink"]["result"]["files"]["w2.bin"]["resumed_from"] == 150_000
    assert (one / "w2.bin").read_bytes() == data["w2.bin"]


def _local_stream(root, plan):
    from sparkrack.remote.relay import file_stream

    return file_stream(str(root), plan)


@pytest.mark.timeout(60)
def test_a_corrupt_partial_is_found_wrong_and_removed(tmp_path):
    src, data, manifest = model(tmp_path)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / ".w2.bin.sparkrack-partial").write_bytes(b"x" * 1000)
    done = finish(relay({"from": ["stdin"], "sink": ["files", str(dst), str(tmp_path / "c"),
                                                     {"w2.bin": manifest["w2.bin"]}],
                         "next": None},
                        data=b"".join(_local_stream(src, [["w2.bin", 200_000, 1000]]))))
    code, report, _ = done[0]
    assert code == 1 and report["sink"]["result"]["files"]["w2.bin"]["state"] == "failed"
    assert "differs from the manifest" in report["sink"]["result"]["files"]["w2.bin"]["error"]
    assert not (dst / ".w2.bin.sparkrack-partial").exists() and not (dst / "w2.bin").exists()


@pytest.mark.timeout(60)
def test_a_node_source_throttles_and_a_second_writer_is_refused(tmp_path):
    src, data, manifest = model(tmp_path)
    dst, port = tmp_path / "dst", free_port()
    receiver = relay({"from": ["recv", "127.0.0.2", port],
                      "sink": ["files", str(dst), str(tmp_path / "c"),
                               {"w2.bin": manifest["w2.bin"]}], "next": None})
    started = time.monotonic()
    sender = relay({"from": ["files", str(src), [["w2.bin", 200_000, 0]], 200_000],
                    "sink": ["none"], "next": ["127.0.0.2", port]})
    (c1, r1, _), (c2, r2, _) = finish(sender, receiver)
    assert (c1, c2) == (0, 0) and time.monotonic() - started >= 0.9
    assert r1["bytes"] == 200_000 + len(b'{"name": "w2.bin", "size": 200000, "offset": 0}\n')
    with open(dst / ".sparkrack-stage.lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = finish(relay({"from": ["stdin"], "sink": ["files", str(dst), str(tmp_path / "c"),
                                                         {"w2.bin": manifest["w2.bin"]}],
                             "next": None}, data=b""))
        code, checked = stager("check", dst, tmp_path / "c", 0, 0, stdin=[["w2.bin", "0" * 64, 1]])
    assert busy[0][0] == 1 and "another transfer" in busy[0][1]["sink"]["result"]["error"]
    assert checked == {"busy": True}


def test_the_source_makes_its_manifest_once_and_remakes_it_when_a_file_changes(tmp_path):
    src, data, manifest = model(tmp_path)
    cache = tmp_path / "cache.json"
    code, made = stager("manifest", src, cache, 1)
    assert code == 0 and made["made"] and made["written"]
    assert parse_manifest((src / MANIFEST).read_text()) == {n: s for n, (s, _) in manifest.items()}
    code, kept = stager("manifest", src, cache, 1)
    assert not kept["made"] and kept["text"] == made["text"] and kept["hashed_bytes"] == 0
    time.sleep(0.01)
    (src / "w2.bin").write_bytes(b"new")
    code, remade = stager("manifest", src, cache, 0)
    assert remade["made"] and not remade["written"] and remade["hashed_bytes"] == 3
    assert (src / MANIFEST).read_text() == made["text"]  # WRITE=0: --check writes nothing


def test_verify_list_and_remove_touch_only_what_the_manifest_lists(tmp_path):
    parent = tmp_path / "models"
    src, data, manifest = model(parent)
    stager("manifest", src, tmp_path / "c", 1)
    (src / "w2.bin").write_bytes(data["w2.bin"][:10])
    code, seen = stager("verify", src, 0)
    assert seen["sizes"]["w2.bin"] == 10 and seen["bad"] == {}
    code, full = stager("verify", src, 1)
    assert full["bad"] == {"w2.bin": "sha256 differs from the manifest"}
    (parent / "other").mkdir()
    code, listed = stager("list", parent)
    assert [e["path"] for e in listed] == [str(src)] and listed[0]["files"] == 3
    (src / "mine.txt").write_text("not the model's")
    cache = tmp_path / "c"
    other = str(tmp_path / "elsewhere" / "x")
    cache.write_text(json.dumps({**json.loads(cache.read_text()), other: [1, 2, 3, "0" * 64]}))
    code, would = stager("remove", src, 1, cache)
    assert sorted(would["removed"]) == sorted([*data, MANIFEST]) and (src / "w2.bin").exists()
    code, gone = stager("remove", src, 0, cache)
    assert code == 0 and gone["left"] == ["mine.txt"] and not (src / "w2.bin").exists()
    assert not (src / "sub").exists()
    assert list(json.loads(cache.read_text())) == [other]  # its own hash entries went too
    code, refused = stager("remove", src, 0, cache)
    assert code == 1 and "not a staged model" in refused["error"]


def test_manifest_parsing_and_the_rack_majority():
    sha = "a" * 64
    assert parse_manifest(f"{sha}  config.json\n{sha} *sub/w.bin\n\n") == {
        "config.json": sha, "sub/w.bin": sha}
    for bad, why in ((f"{sha}  ../etc/passwd", "leaves"), (f"{sha}  /etc/passwd", "leaves"),
                     ("xyz  file", "not `SHA256"), ("", "no file"),
                     (f"{sha}  a\n{'b' * 64}  a", "twice")):
        with pytest.raises(ManifestError, match=why):
            parse_manifest(bad)
    text, holders, others = rack_manifest({"n1": "x", "n2": "x", "n3": "y", "n4": None})
    assert (text, holders, others) == ("x", ["n1", "n2"], ["n3", "n4"])


def test_a_snapshot_of_symlinks_is_manifested_as_its_files(tmp_path):
    """A Hugging Face cache: REPO/snapshots/REV/FILE -> ../../blobs/SHA (relative links)."""
    repo = tmp_path / "models--org--name"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "rev1"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (blobs / "abc").write_bytes(b"weights")
    (snapshot / "model.safetensors").symlink_to("../../blobs/abc")
    (snapshot / ".cache").mkdir()
    (snapshot / ".cache" / "lock").write_text("")
    code, made = stager("manifest", snapshot, tmp_path / "c", 0)
    assert made["sizes"] == {"model.safetensors": 7}
    assert made["text"] == f"{hashlib.sha256(b'weights').hexdigest()}  model.safetensors\n"


@pytest.mark.parametrize("name", ["../victim.txt", "{victim}", "link/victim.txt",
                                  "sub/../../victim.txt"])
def test_remove_refuses_a_manifest_name_leaving_the_model_directory(tmp_path, name):
    """Issue 23 item 1: a node's manifest naming a file outside its directory (`..`, an
    absolute path, a directory link leading out) removes nothing, there or inside."""
    src, data, manifest = model(tmp_path / "models")
    victim = tmp_path / "models" / "victim.txt"
    victim.write_text("not the model's")
    (src / "link").symlink_to(victim.parent)
    lines = [f"{sha}  {n}\n" for n, (sha, _) in sorted(manifest.items())]
    lines.append(f"{'0' * 64}  {name.format(victim=victim)}\n")
    (src / MANIFEST).write_text("".join(lines))
    for check in (1, 0):
        code, refused = stager("remove", src, check, tmp_path / "c")
        assert code == 1 and refused["removed"] == []
        assert refused["error"].startswith(f"{src / MANIFEST} names a file outside the model "
                                           "directory: ")
        assert refused["error"].endswith("; nothing removed (fix or delete the manifest)")
    assert victim.read_text() == "not the model's"
    assert all((src / n).exists() for n in data) and (src / MANIFEST).exists()


@pytest.mark.parametrize("name", ["sub/../w2.bin", "../src/w2.bin", "{src}/w2.bin",
                                  "sub/../../src/config.json"])
def test_a_name_with_dotdot_or_an_absolute_name_is_refused_though_it_resolves_inside(
        tmp_path, name):
    """Issue 46 item 16: the name check on its own. Each name resolves to a model file
    inside the directory, so the realpath check lets it through: the name check alone
    (absolute, or a `..` part) refuses it, on the node (remove, verify, sizes) and on the
    source (the stream) alike, and the local manifest parser too."""
    from sparkrack.remote.stagefiles import escape, within

    src, data, manifest = model(tmp_path)
    name = name.format(src=src)
    assert within(os.path.join(src, name), src)  # what the realpath check sees: inside
    why = f"{name!r} is not a path inside {src}"
    assert escape(str(src), name) == why
    stager("manifest", src, tmp_path / "c", 1)
    (src / MANIFEST).write_text((src / MANIFEST).read_text() + f"{'0' * 64}  {name}\n")
    code, refused = stager("remove", src, 0, tmp_path / "c")
    assert code == 1 and refused["removed"] == [] and why in refused["error"]
    assert all((src / n).read_bytes() == blob for n, blob in data.items())
    code, seen = stager("verify", src, 1)
    assert seen["bad"] == {name: why} and seen["sizes"][name] is None
    assert stager("sizes", src, stdin=[name])[1] == {name: None}
    with pytest.raises(ValueError, match="is not a path inside"):
        b"".join(_local_stream(src, [[name, 1, 0]]))
    with pytest.raises(ManifestError, match="leaves the model directory"):
        parse_manifest(f"{'0' * 64}  {name}\n")


def test_staging_never_follows_a_link_out_of_the_model_directory(tmp_path):
    """Issue 23 item 8: the source refuses a file linked from outside (its bytes would go to
    every node); a snapshot's links into its own blob store stay fine (test above)."""
    src, data, manifest = model(tmp_path)
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"private")
    (src / "stolen.bin").symlink_to(secret)
    code, made = stager("manifest", src, tmp_path / "c", 1)
    assert code == 1 and "stolen.bin leads outside" in made["error"]
    assert not (src / MANIFEST).exists()
    code, sizes = stager("sizes", src, stdin=["stolen.bin", "w2.bin"])
    assert sizes == {"stolen.bin": None, "w2.bin": 200_000}
    with pytest.raises(ValueError, match="stolen.bin leads outside"):
        b"".join(_local_stream(src, [["stolen.bin", 7, 0]]))
    blobs = tmp_path / "elsewhere" / "blobs"  # a blob store that is not the snapshot's own
    blobs.mkdir(parents=True)
    (blobs / "abc").write_bytes(b"x")
    (src / "stolen.bin").unlink()
    (src / "stolen.bin").symlink_to(blobs / "abc")
    assert stager("manifest", src, tmp_path / "c", 0)[0] == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("planted", [".w2.bin.sparkrack-partial", ".sparkrack-stage.lock",
                                     "sub"])
def test_a_receiving_node_never_writes_through_a_link(tmp_path, planted):
    """Issue 23 item 8: a symlink planted where the relay writes (the partial file, the
    stage lock, a directory) is never written through: the file it points at stays."""
    src, data, manifest = model(tmp_path)
    dst, victim = tmp_path / "dst", tmp_path / "victim"
    dst.mkdir()
    victim.mkdir()
    (victim / "file").write_bytes(b"keep")
    (victim / ".w1.bin.sparkrack-partial").write_bytes(b"keep")
    target = victim if planted == "sub" else victim / "file"
    (dst / planted).symlink_to(target)
    name = "sub/w1.bin" if planted == "sub" else "w2.bin"
    done = finish(relay({"from": ["stdin"], "sink": ["files", str(dst), str(tmp_path / "c"),
                                                     {name: manifest[name]}], "next": None},
                        data=b"".join(_local_stream(src, [[name, manifest[name][1], 0]]))))
    code, report, _ = done[0]
    assert code == 1, report
    result = report["sink"]["result"]
    said = result["error"] or result["files"][name]["error"]
    assert "symbolic links" in said or "leads outside" in said, said
    assert (victim / "file").read_bytes() == b"keep"
    assert (victim / ".w1.bin.sparkrack-partial").read_bytes() == b"keep"
    assert sorted(p.name for p in victim.iterdir()) == [".w1.bin.sparkrack-partial", "file"]
