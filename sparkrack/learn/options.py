"""`invoke engines.learn`: an engine version's option table, read from its image on the head
by the extractor (option_extract), kept in the inventory, compared with the nearest known
version (docs/engines.md#engine-versions-and-upgrades).
"""

from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack.core.atomic import write_atomically
from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.engines import option_extract
from sparkrack.engines.option_names import (
    LEARNED_DIR,
    OptionSet,
    read_options,
    tables,
    version_below,
    version_key,
)
from sparkrack.engines.profile_file import image_key_of
from sparkrack.fleet import Fleet
from sparkrack.fleet.containers import OutputTooLong
from sparkrack.inventory import Inventory

EXTRACTOR = Path(option_extract.__file__).parent  # a package, copied whole
IN_CONTAINER = "/tmp/sparkrack_learn"  # the folder it goes in, on the container's sys.path
TIMEOUT_S = 180  # reading a real engine's sources takes seconds; the image start is the rest
LABEL = "sparkrack.learn"
# the extractor parses sources (ast) in one process: a few hundred MB at most, one core;
# it needs no privilege, and what the image prints is read only to OUTPUT_LIMIT
LIMITS = {"mem_limit": "2g", "memswap_limit": "2g", "pids_limit": 64,
          "nano_cpus": 2_000_000_000,  # 2 of a GB10's 20 cores
          "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"],
          # dockerd keeps at most 2 x 4 MB of its log on the head's disk: OUTPUT_LIMIT and
          # then some, so an output over the limit is seen as such (json-file's lines are
          # the printed ones and their JSON wrapping)
          "log_config": {"type": "json-file", "config": {"max-size": "4m", "max-file": "2"}}}
OUTPUT_LIMIT = 1 << 20  # bytes of stdout, and of stderr: a real table is 15-18 KiB
IMAGE_KEYS = ("engine", "version", "allow_abbrev", "underscores")  # the extractor's header
OWN_KEYS = ("image", "image_id", "learned_on", "learned_at")  # sparkrack's, never the image's
VERSION = re.compile(r"[0-9][0-9A-Za-z.+_!-]{0,63}")  # PEP 440's characters; a file name part


def extractor_files(folder: str) -> dict[str, bytes]:
    """The extractor package's files as they go into folder (path -> content)."""
    return {f"{folder}/option_extract/{file.name}": file.read_bytes()
            for file in sorted(EXTRACTOR.glob("*.py"))}


def extractor_argv(folder: str, *args: str, python: str = "python3") -> list[str]:
    """python running the extractor package from folder (first on its path) with args."""
    return [python, "-c", "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
            "runpy.run_module('option_extract', run_name='__main__', alter_sys=True)",
            folder, *args]


class LearnFailed(SparkrackError):
    """The image could not be read: no such image on the head, no engine package in it,
    or the extractor failed; the message has its own words."""


@dataclass(frozen=True)
class Comparison:
    """What changed between two option tables of one engine."""

    old: str  # its label, "sglang 0.5.22"
    added: tuple[str, ...]
    removed: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...]  # (old name, new name): likely, not proven
    changed: tuple[tuple[str, str, str], ...]  # (option, old takes, new takes)

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.renamed or self.changed)

    def lines(self) -> list[str]:
        """One line per change, for the operator."""
        if self.same:
            return [f"the same options as {self.old}"]
        out = [f"compared with {self.old}:"]
        out += [f"  removed  {name}" for name in self.removed]
        out += [f"  renamed  {old} -> {new} (likely: a removed and an added option, close "
                "names, same kind of value)" for old, new in self.renamed]
        out += [f"  added    {name}" for name in self.added]
        out += [f"  changed  {name}: takes {old} -> {new}" for name, old, new in self.changed]
        return out

    def as_dict(self) -> dict:
        return {"compared_with": self.old, "added": list(self.added),
                "removed": list(self.removed), "renamed": [list(p) for p in self.renamed],
                "changed": [list(c) for c in self.changed]}


@dataclass
class Learned:
    """One engines.learn: the table kept, where, and what changed."""

    engine: str
    image: str
    image_id: str
    node: str
    version: str
    file: Path
    options: OptionSet
    comparison: Comparison | None  # None: no other table of the engine is known
    seconds: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"engine": self.engine, "image": self.image, "image_id": self.image_id,
                "node": self.node, "version": self.version, "file": str(self.file),
                "options": len(self.options.takes), "seconds": round(self.seconds, 2),
                "comparison": self.comparison.as_dict() if self.comparison else None,
                "notes": self.notes}


def learn(inventory: Inventory, engine: str, image: str | None = None, *,
          timeout: float = TIMEOUT_S) -> Learned:
    """Read engine's option table from image (default: the inventory's image for engine)
    on the head node; keep it in the inventory; compare it with the nearest known table."""
    key = image_key_of(inventory.path, engine)
    image = image or inventory.vars.images.get(key)
    if not image:
        raise UsageError(f"the inventory has no image for '{key}'", fix="pass --image REF")
    head = inventory.head
    started = time.monotonic()
    with Fleet(inventory, [head]) as fleet:
        docker = fleet.docker(head)
        found = docker.image_info(image)
        if found is None:
            raise LearnFailed(f"{head.name} has no image {image}",
                              fix="load it there first (`invoke provision --role "
                              "engine_images` for the inventory's images, or docker pull)")
        image_id = found[0]
        try:
            code, out, err = docker.run_to_end(
                image, extractor_argv(IN_CONTAINER, "--installed", engine),
                name=f"sparkrack-learn-{engine}-{int(time.time())}",
                files=extractor_files(IN_CONTAINER), timeout=timeout,
                labels={LABEL: engine}, limits=LIMITS, output_limit=OUTPUT_LIMIT)
        except TimeoutError as error:
            raise LearnFailed(str(error), fix="see the image's python3 (`docker run --rm "
                              f"--entrypoint python3 {image} -V` on {head.name})") from None
        except OutputTooLong as error:
            raise LearnFailed(f"{error}: not an option table, nothing learned",
                              fix=f"an option table is some KiB: is {image} the {engine} "
                              "image it says it is?") from None
    stderr = err.decode("utf-8", "replace").strip()
    if code not in (0, 1) or not out.strip():
        last = stderr.splitlines()[-1] if stderr else f"exit code {code}, no output"
        raise LearnFailed(f"reading the {engine} options in {image} on {head.name} failed: "
                          f"{last}", fix="the image must carry the engine's package and a "
                          "python3 (3.9 or later)")
    text = out.decode("utf-8")
    return keep(inventory, engine, image, image_id, head.name, text,
                notes=[line for line in stderr.splitlines() if line.strip()],
                seconds=time.monotonic() - started)


def keep(inventory: Inventory, engine: str, image: str, image_id: str, node: str, text: str,
         *, notes: list[str], seconds: float) -> Learned:
    """Write the extractor's table with the image's ref and ID in its header; compare.
    The image's output is checked first (image_header): its version names the file."""
    header = [f"#: image {image}", f"#: image_id {image_id}", f"#: learned_on {node}",
              f"#: learned_at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"]
    lines = text.rstrip("\n").splitlines()
    version = image_header(engine, image, lines)["version"]
    at = next(i for i, line in enumerate(lines) if line.startswith("#: underscores"))
    folder = inventory.path / LEARNED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{engine}-{version}.txt"
    known = {v: t for v, t in tables(engine, inventory.path).items() if t.file != file}
    write_atomically(file, "\n".join(lines[:at + 1] + header + lines[at + 1:]) + "\n")
    options = read_options(file)
    nearest = nearest_table(known, version)
    return Learned(engine=engine, image=image, image_id=image_id, node=node, version=version,
                   file=file, options=options, seconds=seconds, notes=notes,
                   comparison=compare(nearest, options) if nearest else None)


def image_header(engine: str, image: str, lines: list[str]) -> dict[str, str]:
    """The `#: KEY VALUE` lines of the extractor's output, checked: only IMAGE_KEYS, each
    once, before the first option, naming this engine and a VERSION (it names the file);
    LearnFailed otherwise. sparkrack's own lines (OWN_KEYS) follow them in the file, so the
    image can neither name the file nor say which image or ID the table is of."""
    found: dict[str, str] = {}
    options = False
    for line in lines:
        if not line.startswith("#:"):
            options = options or bool(line.strip() and not line.startswith("#"))
            continue
        key, _, value = line[2:].strip().partition(" ")
        problem = (f"'#: {key}' is sparkrack's own header line" if key in OWN_KEYS else
                   f"'#: {key}' twice" if key in found else
                   f"a header line among the options ({line[:60]!r})" if options else
                   f"'#: {key}' is no header line the extractor writes"
                   if key not in IMAGE_KEYS else None)
        if problem:
            raise LearnFailed(f"the {engine} table read from {image}: {problem}",
                              fix="the image's output writes no header of its own; run the "
                              "extractor by hand to see what it printed")
        found[key] = value.strip()
    if found.get("engine") != engine or "underscores" not in found:
        raise LearnFailed(f"the {engine} table read from {image} has no header",
                          fix="run the extractor by hand to see what it printed")
    version = found.get("version", "")
    if not VERSION.fullmatch(version):
        raise LearnFailed(f"the {engine} table read from {image} names version {version!r}, "
                          "which is not a version", fix="a version is 1-64 letters, digits "
                          "and '.+_!-', starting with a digit: see the engine package's "
                          "metadata in the image")
    return found


def nearest_table(known: dict[str, OptionSet], version: str) -> OptionSet | None:
    """The table of the same version, else of the closest version below, else above."""
    if version in known:
        return known[version]
    below = version_below(known, version)
    above = [v for v in known if version_key(v) > version_key(version)]
    if below:
        return known[below]
    return known[min(above, key=version_key)] if above else None


def compare(old: OptionSet, new: OptionSet) -> Comparison:
    """What changed from old to new (first names only: aliases follow their option)."""
    old_names = {name for name, first in old.primary.items() if name == first}
    new_names = {name for name, first in new.primary.items() if name == first}
    removed = sorted(old_names - new_names)
    added = sorted(new_names - old_names)
    renamed = []
    for name in list(removed):
        same_kind = [a for a in added if new.takes[a] == old.takes[name]]
        close = difflib.get_close_matches(name, same_kind, n=1, cutoff=0.75)
        if close:
            renamed.append((name, close[0]))
            removed.remove(name)
            added.remove(close[0])
    changed = [(name, old.takes[name], new.takes[name]) for name in sorted(old_names & new_names)
               if old.takes[name] != new.takes[name]]
    return Comparison(old=old.label, added=tuple(added), removed=tuple(removed),
                      renamed=tuple(renamed), changed=tuple(changed))
