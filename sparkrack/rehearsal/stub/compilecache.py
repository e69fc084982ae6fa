"""The kernels a rank compiles at its first start, and the caches that spare the next start
that work (stdlib only; runs inside the stub image): one entry per part, keyed by
`compile_key`, written under a temporary name (docs/rehearsal.md#the-stub-engines).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass

WARM_FRACTION = 0.05  # reading compiled kernels against compiling them (docs/engines.md)
ENTRY_BYTES = 32 * 1024  # each compiled artifact's size (a small cubin)
PER_RANK = ("node_rank", "host", "port", "dist_init_addr", "master_addr", "master_port",
            "headless")  # options that differ by rank or address, not by what is compiled
_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Part:
    """One compiled cache of an engine: what reads it, where it defaults to, its entry.
    base: (variable, its default) the default lies under (SGLANG_CACHE_DIR, TMPDIR)."""

    what: str
    env: str
    default: str  # expanded with ~ as the engine does; relative: under base
    entry: str  # relative path of one entry: {key}, {rank}, {arch}
    files: tuple[str, ...]
    base: tuple[str, str] | None = None


# What each pinned release compiles into, read from its wheel (docs/engines.md, "Compile
# caches"): SGLang 0.5.22 (sglang/srt/environ.py, sglang/kernels/jit/utils/compile/cache.py,
# sglang/srt/utils/cpp_extension_loader.py), vLLM 0.33.0 (vllm/envs.py,
# vllm/utils/deep_gemm.py) and the libraries they pin (tilelang 0.1.12, CuTe DSL 4.8.0)
SGLANG_HOME = ("SGLANG_CACHE_DIR", "~/.cache/sglang")
FLASHINFER = Part("FlashInfer JIT", "FLASHINFER_WORKSPACE_BASE", "~",
                  ".cache/flashinfer/{arch}/cached_ops/stub_attention_{key}", ("stub.so",))
TILELANG_ENTRY = "0.1.12/linux-x86_64/kernels/stub_indexer_{key}"
PARTS = {
    "vllm": (Part("torch.compile", "VLLM_CACHE_ROOT", "~/.cache/vllm",
                  "torch_compile_cache/{key}/rank_{rank}_0",
                  ("computation_graph.py", "inductor_cache/stub.py")), FLASHINFER,
             Part("TileLang", "TILELANG_CACHE_DIR", "~/.tilelang/cache", TILELANG_ENTRY,
                  ("kernel.cu", "kernel_lib.so")),
             Part("CuTe DSL", "CUTE_DSL_CACHE_DIR", "root/cutlass_python_cache",  # as root
                  "cute_dsl_stub_indexer_{key}", ("cute_dsl_stub_indexer.mlir",),
                  ("TMPDIR", "/tmp"))),
    "sglang": (Part("DeepGEMM JIT", "SGLANG_DG_CACHE_DIR", "deep_gemm",
                    "cache/kernel.stub_fp8_gemm.{key}", ("kernel.cu", "kernel.cubin"),
                    SGLANG_HOME), FLASHINFER,
               Part("TVM-FFI JIT", "SGLANG_JIT_CACHE_DIR", "~/.cache/sglang/jit",
                    "sm{arch}/stub_norm/build-{key}", ("deps-0/stub_norm.so",)),
               Part("TileLang", "TILELANG_CACHE_DIR", "tilelang", TILELANG_ENTRY,
                    ("kernel.cu", "kernel_lib.so"), SGLANG_HOME),
               Part("CuTe DSL AOT", "SGLANG_CUTE_AOT_CACHE_DIR", "cute_aot",
                    "stub_decode_{key}", ("stub_decode.o",), SGLANG_HOME),
               Part("torch extension", "TORCH_EXTENSIONS_DIR",
                    "~/.cache/torch_extensions/py312_cu130", "stub_allocator_{key}",
                    ("stub_allocator.so",))),
}


def code_hash() -> str:
    """sha256 of the stub's own sources (the engine's code: another build compiles again)."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(_HERE)):
        if name.endswith(".py"):
            with open(os.path.join(_HERE, name), "rb") as handle:
                digest.update(name.encode() + b"\0" + handle.read())
    return digest.hexdigest()


def compile_key(engine: str, version: str, compute_cap: str, options: dict) -> str:
    """The key of what a rank compiles (10 hex digits, as vLLM's cache folders)."""
    shaping = {k: v for k, v in sorted(options.items()) if k not in PER_RANK}
    text = json.dumps([engine, version, code_hash(), compute_cap, shaping], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def entry_path(part: Part, environ: dict, key: str, rank: int, compute_cap: str) -> str:
    """Where part's entry for key lives, from the variable the engine reads."""
    root = environ.get(part.env) or (
        os.path.join(environ.get(part.base[0]) or part.base[1], part.default) if part.base
        else part.default)
    if root.startswith("~"):  # the rank's own home, as the engine expands it
        root = (environ.get("HOME") or os.path.expanduser("~")) + root[1:]
    return os.path.join(root, part.entry.format(key=key, rank=rank,
                                                arch=compute_cap.replace(".", "")))


def warm_up(engine: str, version: str, rank: int, options: dict, compute_cap: str,
            compile_s: float, environ: dict, log) -> tuple[int, int]:
    """Compile what the rank needs or read it from the caches; (found, compiled)."""
    parts = PARTS.get(engine, ())
    key = compile_key(engine, version, compute_cap, options)
    share = compile_s / len(parts) if parts else 0.0
    found = compiled = 0
    began = time.monotonic()
    for part in parts:
        path = entry_path(part, environ, key, rank, compute_cap)
        start = time.monotonic()
        if os.path.isdir(path):
            time.sleep(share * WARM_FRACTION)
            found += 1
            log(f"{part.what}: loaded from the cache in {time.monotonic() - start:.2f} s "
                f"({path})")
            continue
        log(f"{part.what}: compiling into {path}")
        time.sleep(share)
        compiled += 1
        try:
            _write(path, part.files, key)
        except OSError as error:  # a read-only or full cache: compiled, not kept
            log(f"{part.what}: could not keep the compiled kernels: {error}", "WARNING")
        log(f"{part.what}: compiled in {time.monotonic() - start:.2f} s")
    log(f"compile caches: {found} found, {compiled} compiled, "
        f"{time.monotonic() - began:.2f} s (key {key})")
    return found, compiled


def _write(path: str, files: tuple[str, ...], key: str) -> None:
    """The entry's files under a temporary name, then renamed into place whole."""
    temporary = f"{path}.tmp-{os.getpid()}"
    for name in files:
        target = os.path.join(temporary, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        seed = hashlib.sha256(f"{key}/{name}".encode()).digest()
        with open(target, "wb") as handle:
            handle.write((seed * (ENTRY_BYTES // len(seed) + 1))[:ENTRY_BYTES])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.rename(temporary, path)
    except OSError:  # another process kept the same entry first
        shutil.rmtree(temporary, ignore_errors=True)
