"""Images: which ID is right (pure), the tar reader, and the relay chain run locally with a
fake `docker` (three relays on loopback addresses)."""

import os
import subprocess
import sys
import time

import pytest

from sparkrack.facts.provision import NodeFacts
from sparkrack.provision.images import RELAY, resolve_images, tar_image
from sparkrack.provision.testing import write_image_tar

ORDER = ["spark-01", "spark-02", "spark-03"]


def facts(**images) -> dict:
    return {name: NodeFacts(images=value) for name, value in images.items()}


def test_tar_source_wins(tmp_path):
    tar = tmp_path / "s.tar"
    image_id = write_image_tar(tar, "t/s:1", 4096)
    targets = resolve_images({"t/s:1": str(tar)}, facts(spark_01={}), ORDER, "spark-01")
    assert targets["t/s:1"].image_id == image_id
    assert targets["t/s:1"].source == f"tar:{tar}"


def test_head_wins_over_the_others():
    found = facts(**{"spark-01": {"t/s:1": "sha256:aa"}, "spark-02": {"t/s:1": "sha256:bb"},
                     "spark-03": {"t/s:1": "sha256:bb"}})
    target = resolve_images({"t/s:1": ""}, found, ORDER, "spark-01")["t/s:1"]
    assert (target.image_id, target.source) == ("sha256:aa", "node:spark-01")


def test_without_the_head_the_holders_must_agree():
    agree = facts(**{"spark-01": {}, "spark-02": {"t/s:1": "sha256:bb"},
                     "spark-03": {"t/s:1": "sha256:bb"}})
    target = resolve_images({"t/s:1": ""}, agree, ORDER, "spark-01")["t/s:1"]
    assert (target.image_id, target.source) == ("sha256:bb", "node:spark-02")
    disagree = facts(**{"spark-01": {}, "spark-02": {"t/s:1": "sha256:bb"},
                        "spark-03": {"t/s:1": "sha256:cc"}})
    error = resolve_images({"t/s:1": ""}, disagree, ORDER, "spark-01")["t/s:1"].error
    assert error.startswith("nodes disagree on t/s:1 (spark-02=bb, spark-03=cc)")
    nobody = resolve_images({"t/s:1": ""}, facts(**{"spark-01": {}}), ORDER, "spark-01")
    assert nobody["t/s:1"].error.startswith("no node has t/s:1 and no source tar is set")


def test_tar_problems_are_explained(tmp_path):
    tar = tmp_path / "s.tar"
    write_image_tar(tar, "t/other:1", 1024)
    with pytest.raises(ValueError, match="holds t/other:1, not t/s:1"):
        tar_image(tar, "t/s:1")
    with pytest.raises(ValueError, match="No such file"):
        tar_image(tmp_path / "none.tar", "t/s:1")
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    with pytest.raises(ValueError, match="not a docker-save archive"):
        tar_image(tmp_path / "junk.tar", "t/s:1")
    missing = resolve_images({"t/s:1": str(tmp_path / "none.tar")}, {}, ORDER, "spark-01")
    assert "No such file" in missing["t/s:1"].error


FAKE_DOCKER = """#!/bin/sh
# a stand-in for docker: `save` prints the tar, `load` stores what it reads
case $1 in
save) cat "$FAKE_TAR" ;;
load) cat > "$FAKE_OUT"; echo "Loaded image: x" ;;
esac
"""


@pytest.mark.timeout(60)
def test_relay_chain_moves_the_stream_once_and_every_hop_loads_it(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    tar = tmp_path / "image.tar"
    write_image_tar(tar, "t/s:1", 3 << 20)
    port, token = str(43000 + os.getpid() % 500), "tok"

    def relay(*args, out=None):
        """One relay; the token goes in on stdin (its argv is what `ps` shows everyone)."""
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "FAKE_TAR": str(tar), "FAKE_OUT": str(out or tmp_path / "unused")}
        process = subprocess.Popen([sys.executable, "-c", RELAY, *args], env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        process.stdin.write(token + "\n")
        process.stdin.close()
        assert token not in args
        return process

    last = relay("recv", "127.0.0.3", port, "1", out=tmp_path / "c.tar")
    middle = relay("recv", "127.0.0.2", port, "1", "127.0.0.3", port, out=tmp_path / "b.tar")
    intruder = ("import socket, sys, time\n"
                "for _ in range(50):\n"
                "    try:\n"
                "        s = socket.create_connection(('127.0.0.2', int(sys.argv[1])))\n"
                "        s.sendall(b'wrong-token\\n'); s.close(); break\n"
                "    except OSError:\n"
                "        time.sleep(0.1)\n")
    intruder_ok = subprocess.run([sys.executable, "-c", intruder, port], timeout=20,
                                 check=False)
    assert intruder_ok.returncode == 0
    time.sleep(0.2)
    source = relay("save", "t/s:1", "127.0.0.2", port)
    outputs = []
    for process in (source, middle, last):
        process.wait(timeout=30)
        outputs.append((process.stdout.read(), process.stderr.read()))
    assert [p.returncode for p in (source, middle, last)] == [0, 0, 0], outputs
    assert (tmp_path / "b.tar").read_bytes() == tar.read_bytes()
    assert (tmp_path / "c.tar").read_bytes() == tar.read_bytes()
    assert f'"bytes": {tar.stat().st_size}' in outputs[0][0]
