"""Provisioning's questions: files, units, HCAs, guard commands, images, netdevs.

Each kind's query (its arguments to sparkrack/remote/gather.py) and its parser (pure,
tested against recorded output); `parse_facts` turns one round trip's answers into
`NodeFacts` for the plan. Units are asked the same way for everyone (the clock cap unit of
`invoke status` too), so they are parsed here once.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .queries import Answers, Query, answer

CONTENT_LIMIT = 65536  # files up to this size come back whole (for diffs and hashes)
ROCE_V2 = "RoCE v2"
ACTIVE = "4: ACTIVE"  # ports/1/state of a port whose link is up
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "UnitFileState",
                   "NeedDaemonReload", "ExecMainStatus", "FragmentPath",
                   "ActiveEnterTimestampMonotonic")


def file_query(path: str, limit: int = CONTENT_LIMIT) -> Query:
    """stat of path, its content when a regular file of at most limit bytes (else its
    sha256), its entries when a directory."""
    return Query("file", (path,), ("f", path, str(limit)))


def unit_query(name: str) -> Query:
    """`systemctl show` of a unit."""
    return Query("unit", (name,), ("u", name, ",".join(UNIT_PROPERTIES)))


def roce_query(hca: str) -> Query:
    """An RDMA device: present, port state, netdevs, GID table."""
    return Query("roce", (hca,), ("r", hca))


def guard_query(argv: Iterable[str]) -> Query:
    """The exit code of a guard command."""
    value = tuple(argv)
    return Query("guard", value, ("x", str(len(value)), *value))


IMAGES = Query("images", (), ("i",))
NETDEVS = Query("netdevs", (), ("n",))


# --- Parsed facts ----------------------------------------------------------------------


@dataclass(frozen=True)
class FileFacts:
    """What stat (and a read, for small files) says about one path."""

    exists: bool = False
    type: str = ""  # file | directory | link | other
    mode: str = ""  # octal without leading zeros, as stat %a prints it ("644")
    owner: str = ""
    group: str = ""
    size: int = 0
    mtime: str = ""  # seconds.nanoseconds, exactly as stat printed it
    sha256: str | None = None
    content: bytes | None = field(default=None, repr=False)
    entries: tuple[str, ...] = ()  # a directory's entry names


@dataclass(frozen=True)
class UnitFacts:
    """A systemd unit as `systemctl show` reports it."""

    load: str = "not-found"
    active: str = "inactive"
    sub: str = "dead"
    result: str = ""
    enabled: str = ""
    need_reload: bool = False
    exit_status: int | None = None
    fragment: str = ""
    active_since_monotonic_us: int = 0

    @property
    def is_enabled(self) -> bool:
        return self.enabled in ("enabled", "enabled-runtime", "static", "alias", "indirect",
                                "generated")

    @property
    def succeeded(self) -> bool:
        """Active and successful (a oneshot that ran to its end this boot)."""
        return self.active == "active" and self.result == "success"


@dataclass(frozen=True)
class HcaFacts:
    """One RDMA device under /sys/class/infiniband."""

    present: bool = False
    state: str = ""
    netdevs: tuple[str, ...] = ()
    types: Mapping[int, str] = field(default_factory=dict)
    gids: Mapping[int, str] = field(default_factory=dict)

    @property
    def ipv4_gid_index(self) -> int | None:
        """The lowest GID index whose type is RoCE v2 and whose GID is IPv4-mapped."""
        for index in sorted(self.gids):
            if self.types.get(index) == ROCE_V2 and is_ipv4_mapped(self.gids[index]):
                return index
        return None


@dataclass(frozen=True)
class RoceFacts:
    """The node's HCAs and the NCCL GID index they agree on."""

    hcas: Mapping[str, HcaFacts] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        return [name for name, hca in self.hcas.items() if not hca.present]

    @property
    def down(self) -> list[str]:
        """Present HCAs whose port 1 is not ACTIVE (a cable out, the switch port down)."""
        return [name for name, hca in self.hcas.items() if hca.present and hca.state != ACTIVE]

    @property
    def gid_indexes(self) -> dict[str, int | None]:
        return {name: hca.ipv4_gid_index for name, hca in self.hcas.items() if hca.present}

    @property
    def gid_conflict(self) -> bool:
        """Whether the HCAs put their RoCE v2 IPv4 GID at different indexes (NCCL takes one)."""
        return len({i for i in self.gid_indexes.values() if i is not None}) > 1

    @property
    def gid_index(self) -> int | None:
        """The probed GID index common to every present HCA that has one, else None."""
        found = {i for i in self.gid_indexes.values() if i is not None}
        return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class NodeFacts:
    """Everything one gather round trip learned about a node."""

    boot_id: str = ""
    now: str = ""
    files: Mapping[str, FileFacts] = field(default_factory=dict)
    units: Mapping[str, UnitFacts] = field(default_factory=dict)
    roce: RoceFacts = field(default_factory=RoceFacts)
    guards: Mapping[tuple[str, ...], int] = field(default_factory=dict)
    images: Mapping[str, str] | None = None  # ref -> image ID; None if not gathered
    images_error: str | None = None
    netdevs: tuple[str, ...] = ()

    def file(self, path: str) -> FileFacts:
        return self.files.get(path, FileFacts())

    def unit(self, name: str) -> UnitFacts:
        return self.units.get(name, UnitFacts())


def is_ipv4_mapped(gid: str) -> bool:
    """Whether a GID as sysfs prints it is an IPv4-mapped IPv6 address (::ffff:a.b.c.d)."""
    try:
        return ipaddress.IPv6Address(gid.strip()).ipv4_mapped is not None
    except ValueError:
        return False


def normalize_ref(ref: str) -> str:
    """An image ref spelled as `docker images` prints it: no docker.io/library/, a tag."""
    name = ref
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/",
                   "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        name += ":latest"
    if name.startswith("library/") and name.count("/") == 1:
        name = name[len("library/"):]
    return name


def parse_file(lines: list[str]) -> FileFacts:
    """One `f` section."""
    values: dict[str, Any] = {}
    entries: list[str] = []
    for line in lines:
        key, _, rest = line.partition(" ")
        if key == "missing":
            return FileFacts()
        if key == "entry":
            entries.append(_unquote(rest))
        elif key in ("stat", "content", "sha256"):
            values[key] = rest
    if "stat" not in values:
        return FileFacts()
    kind, mode, owner, group, size, mtime = (values["stat"].split("|") + [""] * 6)[:6]
    content = base64.b64decode(values["content"]) if "content" in values else None
    digest = hashlib.sha256(content).hexdigest() if content is not None else values.get("sha256")
    return FileFacts(
        exists=True, type=_file_type(kind), mode=mode, owner=owner, group=group,
        size=int(size) if size.isdigit() else 0, mtime=mtime, sha256=digest, content=content,
        entries=tuple(entries))


def _unquote(text: str) -> str:
    """A name printed by bash's printf %q, as it is (one line whatever the name holds)."""
    if text.startswith("$'") and text.endswith("'"):
        try:
            return text[2:-1].encode("utf-8").decode("unicode_escape").encode(
                "latin-1").decode("utf-8", errors="surrogateescape")
        except (UnicodeError, ValueError):
            return text
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return parts[0] if len(parts) == 1 else text


def _file_type(stat_type: str) -> str:
    if stat_type in ("regular file", "regular empty file"):
        return "file"
    if stat_type == "directory":
        return "directory"
    if stat_type == "symbolic link":
        return "link"
    return "other"


def parse_unit(lines: list[str]) -> UnitFacts:
    """One `u` section: `systemctl show -p ...` lines."""
    kv = dict(line.split("=", 1) for line in lines if "=" in line)
    status = kv.get("ExecMainStatus", "")
    since = kv.get("ActiveEnterTimestampMonotonic", "")
    return UnitFacts(
        load=kv.get("LoadState", "not-found") or "not-found",
        active=kv.get("ActiveState", "inactive"), sub=kv.get("SubState", "dead"),
        result=kv.get("Result", ""), enabled=kv.get("UnitFileState", ""),
        need_reload=kv.get("NeedDaemonReload") == "yes",
        exit_status=int(status) if status.lstrip("-").isdigit() else None,
        fragment=kv.get("FragmentPath", ""),
        active_since_monotonic_us=int(since) if since.isdigit() else 0)


def parse_hca(lines: list[str]) -> HcaFacts:
    """One `r` section: presence, port state, netdevs and the GID table's filled entries."""
    if not lines or lines[0] != "present":
        return HcaFacts()
    state, netdevs = "", []
    types: dict[int, str] = {}
    gids: dict[int, str] = {}
    target: dict[int, str] | None = None
    for line in lines[1:]:
        if line == "types":
            target = types
        elif line == "gids":
            target = gids
        elif target is None:
            key, _, rest = line.partition(" ")
            if key == "state":
                state = rest
            elif key == "netdev":
                netdevs.append(rest)
        else:
            index, sep, value = line.partition(":")
            if sep and index.isdigit():
                target[int(index)] = value.strip()
    return HcaFacts(present=True, state=state, netdevs=tuple(netdevs), types=types, gids=gids)


def parse_images(lines: list[str]) -> tuple[dict[str, str] | None, str | None]:
    """One `i` section: ({ref: ID}, None) or (None, the docker error)."""
    if not lines or not lines[0].startswith("rc "):
        return None, "no answer from docker"
    if lines[0] != "rc 0":
        error = next((line for line in lines[1:] if line.strip()), lines[0])
        return None, error.strip()
    images = {}
    for line in lines[1:]:
        ref, _, image_id = line.rpartition(" ")
        if ref and image_id and not ref.endswith(":<none>"):
            images[ref] = image_id
    return images, None


def parse_netdevs(lines: list[str]) -> tuple[str, ...]:
    """The interface names of /proc/net/dev (the node's own network namespace)."""
    return tuple(line.split(":", 1)[0].strip() for line in lines if ":" in line
                 and "|" not in line)


def parse_facts(text: str, queries: Iterable[Query]) -> NodeFacts:
    """The gather script's output for these queries -> NodeFacts."""
    return facts_of(answer(text, queries))


def facts_of(answers: Answers) -> NodeFacts:
    """Provisioning's NodeFacts from a round trip's answers (other kinds' are left out)."""
    files: dict[str, FileFacts] = {}
    units: dict[str, UnitFacts] = {}
    hcas: dict[str, HcaFacts] = {}
    guards: dict[tuple[str, ...], int] = {}
    images, images_error, netdevs = None, None, ()
    for query in answers.index:
        lines = answers.lines(query)
        if query.kind == "file":
            files[query.value[0]] = parse_file(lines)
        elif query.kind == "unit":
            units[query.value[0]] = parse_unit(lines)
        elif query.kind == "roce":
            hcas[query.value[0]] = parse_hca(lines)
        elif query.kind == "guard":
            rc = next((line[3:] for line in lines if line.startswith("rc ")), "")
            guards[query.value] = int(rc) if rc.isdigit() else 255
        elif query.kind == "images":
            images, images_error = parse_images(lines)
        elif query.kind == "netdevs":
            netdevs = parse_netdevs(lines)
    return NodeFacts(
        boot_id=answers.boot_id, now=answers.now, files=files, units=units,
        roce=RoceFacts(hcas), guards=guards, images=images, images_error=images_error,
        netdevs=netdevs)
