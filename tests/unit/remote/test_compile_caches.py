"""The compile caches' node side and the stub's compile: the node script that makes, lists
and removes the folders (run here against a tmp directory, as on a node), and the stub
rank's first-start compile that a cache entry spares (keyed by version, code, arch and the
shaping flags; real files, so removing them makes the next start cold again)."""

import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from sparkrack.engines.compilecaches import CACHE_MOUNT, cache_env
from sparkrack.rehearsal.stub import compilecache
from sparkrack.remote import script

KEY = json.dumps({"engine": "sglang", "image": "lmsysorg/sglang:v0.5.22-cu130"})
NAME = "sglang-3dd32b7c2e5e4f01-sm121"


def node(*args):
    """The node script as a node runs it: python3 -I -S -c TEXT ARGS."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script("caches"), *args],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def test_make_list_and_remove_a_folder(tmp_path):
    root = str(tmp_path / "engine-cache")
    code, made = node("make", root, NAME, KEY)
    assert code == 0 and made == {"made": True, "empty": True, "bytes": len(KEY), "files": 1}
    folder = tmp_path / "engine-cache" / NAME
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert json.loads((folder / "sparkrack-cache.json").read_text())["engine"] == "sglang"
    (folder / "deep_gemm").mkdir()
    (folder / "deep_gemm" / "kernel.cubin").write_bytes(b"x" * 1000)
    code, again = node("make", root, NAME, "{}")  # the key file is kept, the entries found
    assert again == {"made": False, "empty": False, "bytes": len(KEY) + 1000, "files": 2}
    assert json.loads((folder / "sparkrack-cache.json").read_text())["engine"] == "sglang"
    code, listed = node("list", root)
    assert [(e["name"], e["bytes"], e["files"], e["key"]["engine"]) for e in listed] == [
        (NAME, len(KEY) + 1000, 2, "sglang")]
    code, checked = node("remove", root, "1", NAME)
    assert code == 0 and checked[NAME]["bytes"] == len(KEY) + 1000 and folder.is_dir()
    code, removed = node("remove", root, "0", NAME)
    assert code == 0 and removed[NAME]["error"] is None and not folder.exists()
    assert node("list", str(tmp_path / "none"))[1] == []


def test_remove_takes_only_its_own_folders(tmp_path):
    root = tmp_path / "engine-cache"
    (root / "notours").mkdir(parents=True)
    (root / "notours" / "data").write_text("keep")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sparkrack-cache.json").write_text("{}")
    (root / "linked").symlink_to(outside)
    code, said = node("remove", str(root), "0", "notours", "linked", "../outside", "gone")
    assert code == 1
    assert "not a sparkrack cache folder" in said["notours"]["error"]
    assert said["linked"]["error"] == said["../outside"]["error"] == "not a cache folder name"
    assert said["gone"] == {"bytes": 0, "error": None, "absent": True}
    assert (root / "notours" / "data").exists() and (outside / "sparkrack-cache.json").exists()
    assert node("make", str(root), "../x", "{}")[0] == 2 and not (tmp_path / "x").exists()


def warm_up(tmp_path, engine="sglang", options=None, compile_s=0.4, rank=0, **environ):
    """compilecache.warm_up with HOME=tmp (the container's home); (found, compiled, log)."""
    lines = []
    found, compiled = compilecache.warm_up(
        engine, "0.5.22", rank, options or {"context_length": 524288, "node_rank": rank},
        "12.1", compile_s, {"HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp"), **environ},
        lambda line, level="INFO": lines.append(line))
    return found, compiled, lines


def bound(engine: str, folder) -> dict[str, str]:
    """sparkrack's cache variables for engine, with the node's folder at folder."""
    return {var: path.replace(CACHE_MOUNT, str(folder)) for var, path in
            cache_env(engine).items()}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_sparkrack_s_variables_put_every_cache_of_the_pinned_release_in_the_folder(engine):
    """Each cache the pinned release compiles into (TVM-FFI, TileLang, CuTe DSL, torch
    extensions, DeepGEMM, ...) lands under the bound folder, none in the container."""
    for part in compilecache.PARTS[engine]:
        path = compilecache.entry_path(part, {"HOME": "/root", "TMPDIR": "/tmp",
                                              **cache_env(engine)}, "k", 0, "12.1")
        assert path.startswith(CACHE_MOUNT + "/"), (part.what, path)


def test_a_first_start_compiles_and_keeps_the_kernels_the_next_reads_them(tmp_path):
    cache = tmp_path / "cache"
    parts = len(compilecache.PARTS["sglang"])
    began = time.monotonic()
    found, compiled, lines = warm_up(tmp_path, **bound("sglang", cache))
    assert (found, compiled) == (0, parts) and time.monotonic() - began >= 0.4
    assert lines[-1].startswith(f"compile caches: 0 found, {parts} compiled")
    kernels = list((cache / "deep_gemm" / "cache").iterdir())
    assert [k.name.split(".")[1] for k in kernels] == ["stub_fp8_gemm"]
    assert (kernels[0] / "kernel.cubin").stat().st_size == compilecache.ENTRY_BYTES
    assert list((cache / "flashinfer" / ".cache" / "flashinfer" / "121" / "cached_ops").iterdir())
    assert list((cache / "sglang_jit" / "sm121" / "stub_norm").iterdir())
    assert not (tmp_path / ".cache").exists()  # nothing in the container's home
    began = time.monotonic()
    found, compiled, lines = warm_up(tmp_path, compile_s=20, **bound("sglang", cache))
    assert (found, compiled) == (parts, 0) and time.monotonic() - began < 10  # 1/20 of 20 s
    assert any(line.startswith("DeepGEMM JIT: loaded from the cache") for line in lines)
    assert any(line.startswith("TVM-FFI JIT: loaded from the cache") for line in lines)


def test_another_flag_compiles_into_the_same_folder_a_rank_s_own_do_not(tmp_path):
    env = bound("vllm", tmp_path / "cache")
    parts = len(compilecache.PARTS["vllm"])
    assert warm_up(tmp_path, "vllm", compile_s=0, **env)[:2] == (0, parts)
    # another rank and address: the same compiled graphs (its own rank_<r>_0 entry aside)
    same = {"context_length": 524288, "node_rank": 0, "host": "0.0.0.0", "port": 8001}
    assert warm_up(tmp_path, "vllm", same, compile_s=0, **env)[:2] == (parts, 0)
    other = {"context_length": 131072, "node_rank": 0}
    assert warm_up(tmp_path, "vllm", other, compile_s=0, **env)[:2] == (0, parts)
    assert len(os.listdir(tmp_path / "cache" / "vllm" / "torch_compile_cache")) == 2


def test_removed_entries_or_a_half_written_one_make_the_next_start_cold(tmp_path):
    env = bound("sglang", tmp_path / "cache")
    parts = len(compilecache.PARTS["sglang"])
    assert warm_up(tmp_path, compile_s=0, **env)[:2] == (0, parts)
    entry = next((tmp_path / "cache" / "deep_gemm" / "cache").iterdir())
    entry.rename(entry.with_name(entry.name + ".tmp-99"))  # a start killed mid-compile
    assert warm_up(tmp_path, compile_s=0, **env)[:2] == (parts - 1, 1)
    shutil.rmtree(tmp_path / "cache")
    assert warm_up(tmp_path, compile_s=0, **env)[:2] == (0, parts)


def test_the_key_follows_version_code_and_arch():
    options = {"context_length": 524288}
    base = compilecache.compile_key("sglang", "0.5.22", "12.1", options)
    assert compilecache.compile_key("sglang", "0.5.23", "12.1", options) != base
    assert compilecache.compile_key("sglang", "0.5.22", "12.0", options) != base
    assert compilecache.compile_key("sglang", "0.5.22", "12.1",
                                    {**options, "node_rank": 5, "master_addr": "x"}) == base
    assert len(base) == 10


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_without_a_folder_from_the_node_the_caches_stay_in_the_container(tmp_path, engine):
    found, compiled, lines = warm_up(tmp_path, engine, compile_s=0)
    assert compiled == len(compilecache.PARTS[engine])
    assert str(tmp_path / ".cache") in " ".join(lines)
