"""What `invoke watch.install` ships to the watchdog's node, built on the control machine:
lib/ (sparkrack and its run-time distributions, copied as their RECORD lists them), the
inventory copy and README.md; `platform_problem` says when the node's Python cannot run
them (docs/watchdog.md#installing-it-on-a-node, docs/watchdog.md#the-nodes-python).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import sparkrack
from sparkrack.core.errors import UsageError
from sparkrack.data import KINDS, OWN_FOLDER, search_dirs, shipped
from sparkrack.facts.platform import Platform

PACKAGE_DIR = Path(sparkrack.__file__).resolve().parent
# pyproject.toml's [project].dependencies (tests/unit/watchdog/test_watchdog_install.py checks this;
# packaging is needed here only, to read the others' requirements, and ships too).
RUNTIME_REQUIREMENTS = ("fabric>=3.2", "paramiko>=3.4", "invoke>=2.2", "pyyaml>=6",
                        "jinja2>=3.1.6", "docker[ssh]>=7.1", "rich>=13", "filelock>=3.20.1",
                        "prometheus-client>=0.20", "packaging>=23", "requests>=2.32",
                        "urllib3>=2.2", "cryptography>=42", "pysnmp>=7.1")
MANIFEST = ".sparkrack-manifest"  # in lib/: `sha256  path` lines, as sha256sum -c reads them
KEY_FILE = "ssh/id_ed25519"  # under the install directory, made on the node
KNOWN_HOSTS = "known_hosts"  # in the inventory copy
COPY_HEADER = ("# Written by `invoke watch.install` from the inventory's {source}: the watchdog's\n"
               "# copy, which reaches every node with the watchdog's own key. Edit the original,\n"
               "# then run watch.install again.\n")
CONNECTION_KEYS = ("ansible_ssh_private_key_file", "known_hosts_file")

def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def platform_problem(control: Platform, node: Platform, python: str) -> str | None:
    """Why the libraries built for control cannot run under node's python, or None."""
    differ = []
    if control.version[:2] != node.version[:2]:
        differ.append(f"Python {'.'.join(map(str, node.version[:2]))} there, "
                      f"{'.'.join(map(str, control.version[:2]))} here")
    if control.machine != node.machine:
        differ.append(f"{node.machine} there, {control.machine} here")
    if control.soabi != node.soabi and not differ:
        differ.append(f"extension ABI {node.soabi} there, {control.soabi} here")
    if control.libc[0] != node.libc[0]:
        differ.append(f"{node.libc[0] or 'an unknown libc'} there, {control.libc[0]} here")
    elif control.libc[1] and node.libc[1] and _version(node.libc[1]) < _version(control.libc[1]):
        differ.append(f"{node.libc[0]} {node.libc[1]} there, older than {control.libc[1]} here")
    if not differ:
        return None
    return (f"the node's {python} ({node.describe()}) cannot run the libraries of this "
            f"machine's Python ({control.describe()}): {'; '.join(differ)}")


PLATFORM_FIX = ("run watch.install from a machine whose Python matches the node's (the same "
                "minor version and architecture: another node of the rack will do), or give "
                "--python a matching interpreter on the node")


# --- The libraries ---------------------------------------------------------------------


@dataclass(frozen=True)
class Library:
    """The files of lib/: {path under lib/: local file}, and what they come from."""

    files: dict[str, Path] = field(hash=False)
    distributions: tuple[str, ...]  # "name version", sorted

    def manifest(self) -> str:
        """`sha256  path` per file, sorted by path (what sha256sum -c checks on the node)."""
        return "".join(f"{_sha256(source)}  {path}\n"
                       for path, source in sorted(self.files.items()))

    def tar(self, manifest: str) -> bytes:
        """Every file (and the manifest) as one gzip'd tar, paths relative to lib/."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
            for path, source in sorted(self.files.items()):
                info = tar.gettarinfo(str(source), arcname=path)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode = 0o755 if source.stat().st_mode & 0o111 else 0o644
                with open(source, "rb") as handle:
                    tar.addfile(info, handle)
            data = manifest.encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _skipped(parts: tuple[str, ...]) -> bool:
    return "__pycache__" in parts or parts[-1].endswith((".pyc", ".pyo"))


def package_files(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """The sparkrack package as it is here, every file but bytecode: its data too (the
    roles, which the launch specs render the nodes' env files from, since the watchdog's
    restart is an `up`; the engine profiles, model data and rules). The roles go to
    sparkrack/roles/ as in the wheel, also from a checkout, where they are the top-level
    roles/."""
    files = _tree(package_dir, Path(package_dir.name))
    files.update(_tree(shipped("roles"), Path(package_dir.name, "roles")))
    return files


def _tree(folder: Path, prefix: Path) -> dict[str, Path]:
    """{prefix/relative path: file} for every file under folder but bytecode."""
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = prefix / path.relative_to(folder)
        if path.is_file() and not _skipped(relative.parts):
            files[relative.as_posix()] = path
    return files


def runtime_distributions(requirements=RUNTIME_REQUIREMENTS) -> list:
    """The installed distributions the requirements need, transitively (extras and
    environment markers evaluated here); UsageError naming one that is not installed."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    found: dict[str, object] = {}
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop(0)
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise UsageError(f"{requirement.name} is not installed on this machine, and the "
                             "watchdog needs it", fix="pip install sparkrack's dependencies "
                             "here, then run watch.install again") from None
        name = dist.metadata["Name"].lower().replace("_", "-")
        extras = set(requirement.extras)
        known = found.get(name)
        if known is not None and extras <= known[1]:
            continue
        extras |= known[1] if known is not None else set()
        found[name] = (dist, extras)
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra})
                                            for extra in ({""} | extras)):
                todo.append(needed)
    return [dist for dist, _ in found.values()]


def distribution_files(dist) -> dict[str, Path]:
    """A distribution's importable files and its dist-info, relative to its site dir."""
    name = dist.metadata["Name"]
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        raise UsageError(f"{name} is installed in editable mode here: its files are not in "
                         "site-packages", fix=f"install {name} normally (pip install {name})")
    if dist.files is None:
        raise UsageError(f"{name}: no RECORD of its files (installed by another tool)",
                         fix=f"reinstall it with pip (pip install --force-reinstall {name})")
    files = {}
    for entry in dist.files:
        parts = entry.parts
        if not parts or parts[0] == ".." or _skipped(parts) or entry.suffix == ".pth":
            continue
        source = Path(dist.locate_file(entry))
        if source.is_file():
            files[entry.as_posix()] = source
    return files


def build_library(package_dir: Path = PACKAGE_DIR,
                  requirements=RUNTIME_REQUIREMENTS) -> Library:
    """lib/: the sparkrack package and its runtime distributions."""
    files: dict[str, Path] = {}
    names = []
    for dist in runtime_distributions(requirements):
        files.update(distribution_files(dist))
        names.append(f"{dist.metadata['Name']} {dist.version}")
    files.update(package_files(package_dir))
    return Library(files, tuple(sorted(names, key=str.lower)))


# --- The inventory copy ------------------------------------------------------------------


def _strip(mapping, keys=CONNECTION_KEYS) -> dict:
    """A vars mapping without the connection keys the copy sets itself."""
    return {k: v for k, v in (mapping or {}).items() if k not in keys}


def _dump(data, source: Path) -> bytes:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return (COPY_HEADER.format(source=f"{source.parent.name}/{source.name}"
                               if source.parent.name in ("group_vars", "host_vars")
                               else source.name) + text).encode()


def inventory_copy(inventory, install_dir: str) -> dict[str, bytes]:
    """{path under inventory/: content}: the watchdog's inventory.

    Every `ansible_ssh_private_key_file` and `known_hosts_file` is taken out wherever it
    was set, and group_vars/all.yml sets them once: the watchdog's key under install_dir,
    and `known_hosts` beside the copy, a copy of the inventory's own (pinned: the service
    trusts these host keys and no other). The inventory's overrides (`.sparkrack/`)
    come along."""
    source = Path(inventory.path)
    files: dict[str, bytes] = {}
    hosts = yaml.safe_load((source / "hosts.yml").read_text()) or {}
    everything = hosts.get("all") or {}
    if "vars" in everything:
        everything["vars"] = _strip(everything["vars"])
    for group in (everything.get("children") or {}).values():
        if not isinstance(group, dict):
            continue
        if "vars" in group:
            group["vars"] = _strip(group["vars"])
        for name, host in list((group.get("hosts") or {}).items()):
            if isinstance(host, dict):
                group["hosts"][name] = _strip(host)
    files["hosts.yml"] = _dump(hosts, source / "hosts.yml")
    own_all = {}
    for folder in ("group_vars", "host_vars"):
        directory = source / folder
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.yml")):
            data = _strip(yaml.safe_load(path.read_text()) or {})
            if folder == "group_vars" and path.stem == "all":
                own_all = data
                continue
            files[f"{folder}/{path.name}"] = _dump(data, path)
    own_all.update({"ansible_ssh_private_key_file": f"{install_dir}/{KEY_FILE}",
                    "known_hosts_file": KNOWN_HOSTS})
    files["group_vars/all.yml"] = _dump(own_all, source / "group_vars" / "all.yml")
    known_hosts = inventory.known_hosts_path
    try:
        files[KNOWN_HOSTS] = known_hosts.read_bytes()
    except OSError as error:
        raise UsageError(f"{known_hosts}: cannot read the inventory's known_hosts: "
                         f"{error.strerror}", fix="the watchdog pins the host keys recorded "
                         "there: run invoke onboard (or rehearsal.up) first") from None
    for kind in KINDS:
        search_dirs(source, kind)  # refuses a folder left in the old place
        for path in sorted((source / OWN_FOLDER / kind).rglob("*")):
            if path.is_file() and not _skipped(path.parts):
                files[path.relative_to(source).as_posix()] = path.read_bytes()
    return files


def check_inventory_copy(inventory, files: dict[str, bytes], install_dir: str) -> None:
    """Load the copy (in a temporary folder) and compare it with the original: the same
    nodes, ranks, addresses and vars, only the key and known_hosts differ. A difference is
    a bug here, not the operator's: it raises RuntimeError."""
    import dataclasses
    import tempfile

    from sparkrack.inventory import load_inventory

    with tempfile.TemporaryDirectory(prefix="sparkrack-watchdog-inventory-") as scratch:
        root = Path(scratch)
        for path, content in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(content)
        copy = load_inventory(root)
    key = Path(f"{install_dir}/{KEY_FILE}")

    def shape(inv, with_key):
        return [(n.name, n.address, n.port, n.user, n.rank, n.roce_addr,
                 dataclasses.replace(n.vars, known_hosts_file=KNOWN_HOSTS),
                 n.key_file if with_key else None) for n in (*inv.nodes, *inv.spares)]

    if shape(copy, False) != shape(inventory, False) or any(
            n.key_file != key for n in (*copy.nodes, *copy.spares)) or dataclasses.replace(
            copy.vars, known_hosts_file=KNOWN_HOSTS) != dataclasses.replace(
            inventory.vars, known_hosts_file=KNOWN_HOSTS):
        raise RuntimeError("the watchdog's inventory copy differs from the inventory beyond "
                           "its key and known_hosts (a sparkrack bug)")


def readme() -> bytes:
    """The README shipped beside lib/ (the unit's Documentation=)."""
    path = PACKAGE_DIR.parent / "README.md"
    if path.is_file():
        return path.read_bytes()
    return (b"# sparkrack watchdog\n\nInstalled by `invoke watch.install`; see sparkrack's "
            b"docs/watchdog.md.\n")
