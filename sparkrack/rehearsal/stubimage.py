"""Stub engine images without a registry: deterministic `docker save` tars, built here, one
per engine, rebuilt only when their inputs changed; their layout:
docs/rehearsal.md#the-stub-images. `build_stub_images()` writes them where the inventory's
rehearsal_image_sources says.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkrack.rehearsal.layout import STATE_DIR
from sparkrack.rehearsal.nodefs import read_json_object
from sparkrack.rehearsal.stubversions import (
    StubVersion,
    known,
    parser_sources,
    stub_version,
)

BUILDER_VERSION = 2
IMAGES_DIR = STATE_DIR / "images"
ENGINES = ("sglang", "vllm")
EPOCH = 1704067200  # 2024-01-01T00:00:00Z
CREATED = "2024-01-01T00:00:00Z"
PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
LIBDIR = "usr/lib/x86_64-linux-gnu"
LOADER = "ld-linux-x86-64.so.2"
SITE = "usr/local/lib/python3.11/dist-packages"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HERE = Path(__file__).resolve().parent
STUB_DIR = HERE / "stub"
SIM_DIR = HERE / "sim"
REPO = HERE.parents[1]
REHEARSAL_INVENTORY = REPO / "inventory" / "rehearsal"

STUB_MODULES = ("__init__.py", "api.py", "cli.py", "compilecache.py", "completion.py",
                "config.py", "engine.py", "fabric.py", "faults.py", "gpu.py", "group.py",
                "head.py", "hubtoken.py", "latency.py", "leak.py", "log.py", "metrics.py",
                "nccl.py", "rank.py", "record.py", "server.py", "slots.py", "text.py",
                "transport.py", "worker.py")  # modeldir.py is control side
SIM_MODULES = ("gpusim/__init__.py", "gpusim/client.py", "gpusim/config.py")  # in sim/
STDLIB_SKIP_DIRS = {"test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo",
                    "ensurepip", "pydoc_data", "lib2to3", "distutils", "venv", "unittest",
                    "__pycache__", "site-packages", "dist-packages", "sqlite3", "curses",
                    "dbm", "__phello__", "config-3.11-x86_64-linux-gnu"}
STDLIB_SKIP_FILES = {"sitecustomize.py", "turtle.py", "antigravity.py", "this.py",
                     "__hello__.py", "EXTERNALLY-MANAGED", "LICENSE.txt"}
DYNLOAD_SKIP = re.compile(r"^(_test|_ctypes_test|xxlimited|_xx|_ssl|_hashlib|_sqlite3|_dbm|"
                          r"_gdbm|_curses|readline|nis|ossaudiodev|_tkinter|_crypt)")

SGLANG_INIT = '"""SGLang stand-in of the sparkrack rehearsal rack (sparkrack_stub)."""\n\n' \
              '__version__ = "{version}"\n'
SGLANG_LAUNCH = '"""`python3 -m sglang.launch_server ...`: one stub SGLang rank."""\n\n' \
                'from sparkrack_stub.engine import main\n\n' \
                'if __name__ == "__main__":\n    main("sglang")\n'
VLLM_SCRIPT = '#!/usr/bin/python3\n"""`vllm serve ...`: one stub vLLM rank."""\n\n' \
              'from sparkrack_stub.engine import main\n\n' \
              'if __name__ == "__main__":\n    main("vllm")\n'
ENTRYPOINTS = {"sglang": ["python3", "-m", "sglang.launch_server"], "vllm": ["vllm", "serve"]}


class StubImageError(RuntimeError):
    """The image cannot be built here (no Debian python3.11, ldd failed, ...)."""


@dataclass(frozen=True)
class Entry:
    """One member of the layer: a directory, a file (data) or a symlink (target)."""

    path: str  # relative, no leading slash
    kind: str  # "dir" | "file" | "link"
    mode: int = 0o755
    data: bytes = b""
    target: str = ""


# --- The layer's content --------------------------------------------------------------------

def _stdlib_files() -> list[tuple[Path, str]]:
    """(host path, path in the image) of every stdlib file the runtime ships."""
    found = []
    for root, dirs, files in os.walk(STDLIB):
        dirs[:] = sorted(d for d in dirs if d not in STDLIB_SKIP_DIRS)
        for name in sorted(files):
            host = Path(root) / name
            if name in STDLIB_SKIP_FILES or host.is_symlink() or name.endswith((".pyc", ".pyo")):
                continue
            if Path(root).name == "lib-dynload" and DYNLOAD_SKIP.match(name):
                continue
            found.append((host, str(host.relative_to("/"))))
    return found


def _shared_libraries(binaries: Iterable[Path]) -> dict[str, Path]:
    """{soname: real file} of every library ldd names for binaries, and the loader."""
    binaries = list(binaries)
    try:
        out = subprocess.run(["ldd", *map(str, binaries)], capture_output=True, text=True,
                             check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise StubImageError(f"ldd failed: {error}") from None
    libraries: dict[str, Path] = {}
    for line in out.splitlines():
        line = line.strip()
        match = re.match(r"^(\S+) => (/\S+) \(0x", line)
        if match:
            libraries[match.group(1)] = Path(match.group(2)).resolve()
        elif re.match(rf"^/\S*{re.escape(LOADER)} \(0x", line):
            libraries[LOADER] = Path(line.split()[0]).resolve()
        elif "not found" in line:
            raise StubImageError(f"ldd: {line}")
    if LOADER not in libraries:
        raise StubImageError(f"ldd named no {LOADER}")
    return libraries


def _source_entries(refs_engine: str, stub: StubVersion) -> list[Entry]:
    """Every entry of one engine's layer, as stub's version, except the .pyc files."""
    if not PYTHON.is_file() or not (STDLIB / "os.py").is_file():
        raise StubImageError(f"{PYTHON} and {STDLIB} are needed (Debian's python3.11: "
                             "apt-get install python3.11-minimal libpython3.11-stdlib)")
    entries: dict[str, Entry] = {}

    def add(entry: Entry) -> None:
        parts = entry.path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent not in entries:
                entries[parent] = Entry(parent, "dir", 0o1777 if parent == "tmp" else 0o755)
        entries[entry.path] = entry

    def file(path: str, data: bytes, mode: int = 0o644) -> None:
        add(Entry(path, "file", mode, data))

    file("usr/bin/python3.11", PYTHON.read_bytes(), 0o755)
    add(Entry("usr/bin/python3", "link", 0o777, target="python3.11"))
    stdlib = _stdlib_files()
    for host, path in stdlib:
        file(path, host.read_bytes(), 0o755 if os.access(host, os.X_OK) and
             host.suffix not in (".py", ".so") else 0o644)
    dynload = [host for host, _ in stdlib if host.suffix == ".so"]
    for soname, real in sorted(_shared_libraries([PYTHON, *dynload]).items()):
        file(f"{LIBDIR}/{soname}", real.read_bytes(), 0o755)
    add(Entry(f"usr/lib64/{LOADER}", "link", 0o777, target=f"../lib/x86_64-linux-gnu/{LOADER}"))
    for name, target in (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin"),
                         ("sbin", "usr/sbin")):
        add(Entry(name, "link", 0o777, target=target))
    for name in ("usr/sbin", "usr/local/sbin", "etc", "root", "proc", "sys", "dev",
                 "run", "var/tmp"):
        add(Entry(name, "dir", 0o700 if name == "root" else 0o755))
    add(Entry("tmp", "dir", 0o1777))
    file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/"
                       b"nonexistent:/usr/sbin/nologin\n")
    file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    for name in STUB_MODULES:
        file(f"{SITE}/sparkrack_stub/{name}", (STUB_DIR / name).read_bytes())
    for name in SIM_MODULES:
        file(f"{SITE}/{name}", (SIM_DIR / name).read_bytes())
    file(f"{SITE}/sparkrack_stub/options/{stub.engine}-{stub.version}.txt", stub.table().encode())
    for path, text in parser_sources(stub).items():
        file(f"{SITE}/{path}", text.encode())
    if refs_engine == "sglang":
        file(f"{SITE}/sglang/__init__.py", SGLANG_INIT.format(version=stub.version).encode())
        file(f"{SITE}/sglang/launch_server.py", SGLANG_LAUNCH.encode())
    else:
        file("usr/local/bin/vllm", VLLM_SCRIPT.encode(), 0o755)
    return [entries[key] for key in sorted(entries)]


def _compiled(entries: list[Entry]) -> list[Entry]:
    """Unchecked-hash .pyc entries for every .py entry, compiled by the image's python."""
    sources = [e for e in entries if e.kind == "file" and e.path.endswith(".py")]
    script = (
        "import importlib.util, json, sys\n"
        "from importlib._bootstrap_external import _code_to_hash_pyc\n"
        "jobs = json.load(sys.stdin)\n"
        "for source, dfile, out in jobs:\n"
        "    data = open(source, 'rb').read()\n"
        "    code = compile(data, dfile, 'exec', dont_inherit=True)\n"
        "    pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)\n"
        "    open(out, 'wb').write(pyc)\n")
    with tempfile.TemporaryDirectory(prefix="stubimage-") as tmp:
        jobs = []
        for index, entry in enumerate(sources):
            src = Path(tmp) / f"{index}.py"
            src.write_bytes(entry.data)
            jobs.append((str(src), "/" + entry.path, str(Path(tmp) / f"{index}.pyc")))
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        done = subprocess.run([str(PYTHON), "-I", "-S", "-c", script], input=json.dumps(jobs),
                              text=True, capture_output=True, env=env, timeout=300, check=False)
        if done.returncode != 0:
            raise StubImageError(f"compiling the .pyc files failed: {done.stderr[-2000:]}")
        tag = "cpython-311"
        compiled = []
        for entry, (_, _, out) in zip(sources, jobs, strict=True):
            folder, _, name = entry.path.rpartition("/")
            compiled.append(Entry(f"{folder}/__pycache__/{name[:-3]}.{tag}.pyc", "file",
                                  0o644, Path(out).read_bytes()))
    return compiled


def _layer_entries(engine: str, sources: list[Entry]) -> list[Entry]:
    entries = {e.path: e for e in sources}
    for entry in _compiled(list(entries.values())):
        folder = entry.path.rpartition("/")[0]
        entries.setdefault(folder, Entry(folder, "dir", 0o755))
        entries[entry.path] = entry
    return [entries[key] for key in sorted(entries)]


# --- Deterministic tars ---------------------------------------------------------------------

def _tar(entries: Iterable[Entry]) -> bytes:
    """A GNU tar of entries, in the given order, every header fixed but the content."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.path + ("/" if entry.kind == "dir" else ""))
            info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
            info.mode = entry.mode
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def _canonical(data: object) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def image_tar(engine: str, ref: str, layer: bytes, version: str) -> tuple[bytes, str]:
    """(the `docker save` tar, its image ID) of one engine version's image around layer."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = _canonical({
        "architecture": "amd64", "os": "linux", "created": CREATED,
        "author": "sparkrack rehearsal (stub engine)",
        "config": {"Env": [PATH_ENV, "LANG=C.UTF-8"], "Entrypoint": ENTRYPOINTS[engine],
                   "Cmd": None, "WorkingDir": "/",
                   "Labels": {"org.sparkrack.stub": engine, "org.sparkrack.stub.ref": ref,
                              "org.opencontainers.image.version": version}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": CREATED, "created_by": f"sparkrack stubimage v"
                     f"{BUILDER_VERSION}: python3.11 runtime + stub {engine}"}]})
    config_hex = hashlib.sha256(config).hexdigest()
    layer_id = hashlib.sha256(f"{diff_id}\n{config_hex}".encode()).hexdigest()
    repository, _, tag = ref.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = ref, "latest"
    legacy = _canonical({"id": layer_id, "created": CREATED, "os": "linux",
                         "architecture": "amd64", "config": {}})
    members = [
        Entry(layer_id, "dir", 0o755),
        Entry(f"{layer_id}/VERSION", "file", 0o644, b"1.0"),
        Entry(f"{layer_id}/json", "file", 0o644, legacy),
        Entry(f"{layer_id}/layer.tar", "file", 0o644, layer),
        Entry(f"{config_hex}.json", "file", 0o644, config),
        Entry("manifest.json", "file", 0o644, _canonical([
            {"Config": f"{config_hex}.json", "RepoTags": [ref],
             "Layers": [f"{layer_id}/layer.tar"]}])),
        Entry("repositories", "file", 0o644, _canonical({repository: {tag: layer_id}})),
    ]
    return _tar(sorted(members, key=lambda e: e.path)), "sha256:" + config_hex


def _stub(engine: str, ref: str) -> StubVersion:
    """The stub version ref names; StubImageError when the rehearsal has none."""
    stub = stub_version(engine, ref)
    if stub is None:
        raise StubImageError(f"the rehearsal has no stub {engine} image of the version {ref} "
                             f"names (it has {', '.join(known(engine))})")
    return stub


# --- Cached builds --------------------------------------------------------------------------

def _inputs_digest(engine: str, ref: str, sources: list[Entry]) -> str:
    digest = hashlib.sha256(f"stubimage v{BUILDER_VERSION}\n{engine}\n{ref}\n{PYTHON}\n"
                            f"{sys.implementation.cache_tag}\n".encode())
    for entry in sources:
        digest.update(f"{entry.path}\0{entry.kind}\0{entry.mode:o}\0{entry.target}\0".encode())
        digest.update(hashlib.sha256(entry.data).digest())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def image_refs(inventory=None) -> dict[str, str]:
    """{engine: image ref} from the inventory (default: the repo's rehearsal inventory)."""
    if inventory is None:
        from sparkrack.inventory import load_inventory
        inventory = load_inventory(REHEARSAL_INVENTORY)
    images = inventory.vars.images
    missing = [engine for engine in ENGINES if engine not in images]
    if missing:
        raise StubImageError(f"the inventory names no image for {', '.join(missing)}")
    return {engine: images[engine] for engine in ENGINES}


def build_stub_images(inventory=None, *, out_dir: Path | str | None = None,
                      engines: Iterable[str] = ENGINES, force: bool = False,
                      refs: Mapping[str, str] | None = None) -> dict[str, tuple[Path, str]]:
    """Build each engine's stub image tar; {engine: (tar path, image ID)}.

    The tar goes where the inventory's rehearsal_image_sources names it (out_dir given:
    out_dir/<engine>.tar; no inventory: IMAGES_DIR). Idempotent: a tar whose recorded
    inputs digest still matches is kept as it is (force: rebuild anyway). Refs come from
    refs, else from the inventory's `images`; each ref's tag picks the stub version.
    """
    refs = dict(refs) if refs is not None else image_refs(inventory)
    built: dict[str, tuple[Path, str]] = {}
    for engine in engines:
        if engine not in ENGINES:
            raise StubImageError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
        ref = refs[engine]
        stub = _stub(engine, ref)
        sources = _source_entries(engine, stub)
        digest = _inputs_digest(engine, ref, sources)
        path = _tar_path(inventory, out_dir, engine)
        path.parent.mkdir(parents=True, exist_ok=True)
        record_path = path.with_suffix(".json")
        record = read_json_object(record_path)
        if (not force and record.get("inputs") == digest and path.is_file()
                and path.stat().st_size == record.get("size")):
            built[engine] = (path, record["image_id"])
            continue
        data, image_id = image_tar(engine, ref, _tar(_layer_entries(engine, sources)),
                                   stub.version)
        _write_atomic(path, data)
        _write_atomic(record_path, json.dumps(
            {"engine": engine, "ref": ref, "image_id": image_id, "size": len(data),
             "version": stub.version, "sha256": hashlib.sha256(data).hexdigest(),
             "inputs": digest}, indent=1, sort_keys=True).encode() + b"\n")
        built[engine] = (path, image_id)
    return built


def _tar_path(inventory, out_dir: Path | str | None, engine: str) -> Path:
    """Where engine's tar goes: out_dir, else the inventory's rehearsal_image_sources."""
    if out_dir is not None:
        return Path(out_dir) / f"{engine}.tar"
    sources = inventory.vars.rehearsal_image_sources if inventory is not None else {}
    return Path(sources[engine]) if engine in sources else IMAGES_DIR / f"{engine}.tar"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
