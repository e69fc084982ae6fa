"""Stub images: byte-for-byte deterministic `docker save` tars whose runtime really runs."""

import hashlib
import io
import json
import os
import subprocess
import tarfile

import pytest

from sparkrack.rehearsal import stubimage

REFS = {"sglang": "lmsysorg/sglang:v0.5.22-cu130", "vllm": "vllm/vllm-openai:v0.33.0"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both images built twice from scratch into two folders."""
    first, second = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    return (stubimage.build_stub_images(out_dir=first, refs=REFS, force=True),
            stubimage.build_stub_images(out_dir=second, refs=REFS, force=True))


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {info.name: info for info in tar.getmembers()}


def read(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(name).read()


def test_two_builds_are_byte_for_byte_equal(built):
    one, two = built
    for engine in ("sglang", "vllm"):
        assert one[engine][0].read_bytes() == two[engine][0].read_bytes()
        assert one[engine][1] == two[engine][1]
    assert one["sglang"][1] != one["vllm"][1]


def test_the_tar_is_docker_save_format_with_the_inventory_tags(built):
    for engine, (path, image_id) in built[0].items():
        data = path.read_bytes()
        manifest = json.loads(read(data, "manifest.json"))
        assert len(manifest) == 1 and manifest[0]["RepoTags"] == [REFS[engine]]
        config_bytes = read(data, manifest[0]["Config"])
        assert image_id == "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        config = json.loads(config_bytes)
        [layer_name] = manifest[0]["Layers"]
        layer = read(data, layer_name)
        assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
        assert config["config"]["Entrypoint"] == stubimage.ENTRYPOINTS[engine]
        repository, tag = REFS[engine].rsplit(":", 1)
        assert json.loads(read(data, "repositories")) == {
            repository: {tag: layer_name.split("/")[0]}}
        names = list(members(data))
        assert names == sorted(names)


def test_the_layer_is_a_small_fixed_python_runtime(built):
    data = built[0]["sglang"][0].read_bytes()
    layer = read(data, json.loads(read(data, "manifest.json"))[0]["Layers"][0])
    infos = members(layer)
    names = [name.rstrip("/") for name in infos]
    assert names == sorted(names)
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname) for i in infos.values()} == {
        (stubimage.EPOCH, 0, 0, "", "")}
    site = stubimage.SITE
    for path in ("usr/bin/python3.11", "usr/lib/python3.11/os.py",
                 "usr/lib/python3.11/__pycache__/os.cpython-311.pyc",
                 "usr/lib/x86_64-linux-gnu/libc.so.6", f"{site}/sglang/launch_server.py",
                 f"{site}/sparkrack_stub/engine.py", f"{site}/gpusim/client.py",
                 f"{site}/gpusim/config.py", f"{site}/sparkrack_stub/options/sglang-0.5.22.txt"):
        assert path in infos, path
    assert infos["usr/bin/python3"].linkname == "python3.11"
    assert infos["usr/lib64/ld-linux-x86-64.so.2"].issym()
    assert infos["tmp"].mode == 0o1777 and infos["tmp"].isdir()
    assert not [n for n in names if "/test/" in n or "idlelib" in n or "tkinter" in n
                or "ensurepip" in n or "pydoc_data" in n or "sparkrack_stub/modeldir" in n]
    assert "usr/local/bin/vllm" not in infos  # the vLLM entry point is only in its image
    assert len(data) < 60_000_000


def test_builds_are_cached_until_an_input_changes(tmp_path):
    first = stubimage.build_stub_images(out_dir=tmp_path, refs=REFS, engines=["vllm"])
    stamp = first["vllm"][0].stat().st_mtime_ns
    again = stubimage.build_stub_images(out_dir=tmp_path, refs=REFS, engines=["vllm"])
    assert again == first and again["vllm"][0].stat().st_mtime_ns == stamp
    other = stubimage.build_stub_images(out_dir=tmp_path, engines=["vllm"],
                                        refs={**REFS, "vllm": "vllm/vllm-openai:v0.34.0"})
    assert other["vllm"][1] != first["vllm"][1]
    record = json.loads((tmp_path / "vllm.json").read_text())
    assert record["image_id"] == other["vllm"][1] and record["ref"].endswith("v0.34.0")


def test_the_image_ships_every_runtime_module_of_the_stub():
    """The stub package's modules all run in the image but the control side's."""
    runtime = {path.name for path in stubimage.STUB_DIR.glob("*.py")} - {"modeldir.py"}
    assert set(stubimage.STUB_MODULES) == runtime


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
def test_the_runtime_runs_the_entry_points(built, tmp_path):
    for engine, argv in (("sglang", ["python3", "-m", "sglang.launch_server", "--model-path",
                                     "/m"]),
                         ("vllm", ["vllm", "serve", "/m"])):
        root = tmp_path / engine
        root.mkdir()
        data = built[0][engine][0].read_bytes()
        layer = read(data, json.loads(read(data, "manifest.json"))[0]["Layers"][0])
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            tar.extractall(root, filter="tar")
        env = {"PATH": stubimage.PATH_ENV.split("=", 1)[1]}
        done = subprocess.run(["chroot", str(root), *argv, "--bogus-flag"], env=env,
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 2, done.stderr
        assert "unrecognized arguments: --bogus-flag" in done.stderr
        record = json.loads(done.stdout.splitlines()[0])
        assert record["argv"] == [*argv, "--bogus-flag"] and record["sparkrack_stub"] == engine
        assert (root / "tmp" / "sparkrack-stub-rank0.json").exists()
        assert not list(root.rglob("*.pyc.*"))  # nothing was compiled at run time


def test_the_ref_s_tag_picks_the_stub_version(tmp_path):
    """A 0.5.23 ref gets the made-up next version: its metadata, its parser sources and
    its option list inside, its version as the image's label; an unknown one is refused."""
    ref = "lmsysorg/sglang:v0.5.23-cu130"
    stub = stubimage._stub("sglang", ref)
    entries = {entry.path: entry for entry in stubimage._source_entries("sglang", stub)}
    site = stubimage.SITE
    assert b"Version: 0.5.23" in entries[f"{site}/sglang-0.5.23.dist-info/METADATA"].data
    assert b"__version__ = \"0.5.23\"" in entries[f"{site}/sglang/__init__.py"].data
    assert b"'--schedule-conservative-factor'" in \
        entries[f"{site}/sglang/srt/server_args.py"].data
    assert [p for p in entries if "/sparkrack_stub/options/" in p] == \
        [f"{site}/sparkrack_stub/options/sglang-0.5.23.txt"]
    data, _ = stubimage.image_tar("sglang", ref, b"", stub.version)
    config = json.loads(next(v for k, v in _files(data).items() if k.endswith(".json")
                             and k != "manifest.json" and "/" not in k))
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == "0.5.23"
    with pytest.raises(stubimage.StubImageError, match=r"no stub sglang image of the version "
                       r"lmsysorg/sglang:v0\.6\.0 names \(it has 0\.5\.22, 0\.5\.23\)"):
        stubimage.build_stub_images(out_dir=tmp_path, refs={"sglang": "lmsysorg/sglang:v0.6.0"},
                                    engines=["sglang"])


def _files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
