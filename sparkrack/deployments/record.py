"""Deployment records kept on the head node (current, last-good, failed) and their mirror on
this machine; the one writer of the head's record files (docs/formats.md#deployment-records).
"""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sparkrack.core.atomic import remove, write_atomically
from sparkrack.core.errors import SparkrackError
from sparkrack.facts import records as record_facts
from sparkrack.facts.queries import Answers, answer, argv
from sparkrack.facts.records import KINDS, RECORD_DIR
from sparkrack.fleet import Fleet, sh
from sparkrack.inventory import Inventory
from sparkrack.oplock.identity import state_dir

_WRITE = 'mkdir -p "$1" && cat > "$1/.$2.tmp" && mv "$1/.$2.tmp" "$1/$2.json"'


@dataclass
class Deployment:
    """One deployment of an engine profile on the rack."""

    engine: str
    profile: str
    deployment_id: str
    spec_hash: str
    image: str
    image_id: str
    started: float = field(default_factory=time.time)
    mem_available_kb_before: dict = field(default_factory=dict)
    waivers: dict = field(default_factory=dict)
    overrides: list = field(default_factory=list)
    operator: str = ""  # user@host who started it
    status: str = "starting"  # starting | serving | failed
    error: str = ""  # why it failed
    log_tail: dict = field(default_factory=dict)  # failed: its rank's last lines (start.py)
    phases: dict = field(default_factory=dict)  # wall seconds per start phase (phases.py)
    model_path: str = ""  # the model directory the ranks mount
    weights_digest: str = ""  # its manifest's digest, the same on every node at the start

    def describe(self) -> str:
        """One line: engine, profile, image ID, when and by whom."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))
        by = f", by {self.operator}" if self.operator else ""
        weights = f", weights {self.weights_digest[:12]}" if self.weights_digest else ""
        return (f"{self.engine} {self.profile} ({self.image_id[:19]}, spec {self.spec_hash[:12]}"
                f"{weights}, {when}{by})")


def store_on_head(fleet: Fleet, inventory: Inventory, folder: str, name: str, data: bytes,
                  what: str) -> str:
    """Write folder/name.json on the head node (made if missing; atomic rename: no reader
    sees half a file), the one writer of the head's record files; its path there."""
    head = inventory.head.name
    result = fleet.run({head: sh(_WRITE, folder, name)}, stdin=data, timeout=30)[head]
    if result.status != "ok":
        raise SparkrackError(f"could not write {what} on {head}: {result.error}")
    return f"{folder}/{name}.json"


def write(fleet: Fleet, inventory: Inventory, kind: str, deployment: Deployment) -> None:
    """Store a record on the head node (and in the local mirror). log_tail only where it
    holds lines (a failed record): a reader of an older version takes a record with a field
    it does not know for absent, and the watchdog on the head may be one."""
    fields = {k: v for k, v in asdict(deployment).items() if v or k != "log_tail"}
    data = json.dumps(fields, sort_keys=True).encode()
    store_on_head(fleet, inventory, RECORD_DIR, kind, data, f"the {kind} deployment record")
    _mirror(inventory, kind, data)


def write_nccl(fleet: Fleet, inventory: Inventory, data: dict) -> None:
    """What each rank's NCCL said it uses at the last start, beside the records, for
    `invoke status` (docs/formats.md#deployment-records)."""
    store_on_head(fleet, inventory, RECORD_DIR, record_facts.NCCL,
                  json.dumps(data, sort_keys=True).encode(), "the NCCL record")


def write_power_cycle(fleet: Fleet, inventory: Inventory, data: dict) -> None:
    """The watchdog's last power cycle (in progress, ok or failed) beside the records, for
    `invoke status` (docs/formats.md#deployment-records)."""
    store_on_head(fleet, inventory, RECORD_DIR, record_facts.POWER_CYCLE,
                  json.dumps(data, sort_keys=True).encode(), "the power-cycle record")


def clear(fleet: Fleet, inventory: Inventory, kind: str) -> None:
    """Remove a record (`down` clears "current": nothing runs any more)."""
    head = inventory.head.name
    result = fleet.run({head: ["rm", "-f", f"{RECORD_DIR}/{kind}.json"]})[head]
    if result.ok:
        _mirror(inventory, kind, None)


def mirror_dir(inventory: Inventory) -> Path:
    """This machine's copy of the rack's records (docs/formats.md#deployment-records)."""
    return state_dir() / "deployments" / inventory.vars.rack_name


def mirrored(inventory: Inventory) -> dict[str, Deployment | None]:
    """{kind: Deployment or None} as this machine last wrote them."""
    found: dict[str, Deployment | None] = {}
    for kind in KINDS:
        try:
            found[kind] = Deployment(**json.loads((mirror_dir(inventory) / f"{kind}.json")
                                                  .read_text()))
        except (OSError, ValueError, TypeError):  # absent, damaged, another version
            found[kind] = None
    return found


def _mirror(inventory: Inventory, kind: str, data: bytes | None) -> None:
    """The local mirror follows the head; a mirror that cannot be written is not worth
    failing a start or a stop for (the head holds the record)."""
    path = mirror_dir(inventory) / f"{kind}.json"
    try:
        if data is None:
            remove(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomically(path, data, 0o600)
    except OSError:
        pass


def read(fleet: Fleet, inventory: Inventory) -> dict[str, Deployment | None]:
    """{kind: Deployment or None} from the head node (SparkrackError if it cannot be asked)."""
    head = inventory.head.name
    result = fleet.run({head: argv(record_facts.queries())})[head]
    if result.status != "ok":
        raise SparkrackError(f"could not read the deployment records on {head}: {result.error}")
    return records_of(answer(result.stdout, record_facts.queries()))


def records_of(answers: Answers) -> dict[str, Deployment | None]:
    """{kind: Deployment or None} from a round trip that asked facts.records.queries()."""
    records: dict[str, Deployment | None] = {}
    for kind, data in record_facts.records_of(answers).items():
        try:
            records[kind] = Deployment(**data) if data else None
        except TypeError:  # a record from another version: treat as absent
            records[kind] = None
    return records
