"""What only the watchdog puts on its node, before its role (roles/watchdog) runs there:
the install directory marked as sparkrack's, lib/ (sparkrack and its libraries) and the
watchdog's own SSH key.

- `plan_parts` (pure): the probe's NodeState and the manifest wanted in, a `Parts` out;
- `apply_parts`: mark the directory first (a directory without the mark is never ours),
  stop the service when lib/ changes under it (never half old, half new modules: the role
  starts it again), ship lib/ as one gzip'd tar on the command's stdin (remote/ship.sh
  unpacks it beside the old one, swaps it in and byte-compiles it), and make the ed25519
  key on the node with the shipped cryptography (the private key never leaves it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.facts.watchdog import NodeState
from sparkrack.inventory.watchdog_dir import MARKER_FILE, MARKER_TEXT
from sparkrack.inventory.watchdog_record import MARKER, check_public_key
from sparkrack.remote import script, text
from sparkrack.watchdog import payload
from sparkrack.watchdog.settings import UNIT, Say, Settings, from_root, run_step

SHIP_TIMEOUT_S = 600.0  # unpacking and byte-compiling ~35 MB on a small node


@dataclass(frozen=True)
class Parts:
    """What the watchdog's own parts need on its node."""

    mark: bool = False  # write the marker into the install directory (first of all)
    ship_lib: bool = False
    stop: bool = False  # the service runs: stopped before lib/ changes under it
    make_key: bool = False

    @property
    def changes_node(self) -> bool:
        return self.mark or self.ship_lib or self.stop or self.make_key

    def steps(self, settings: Settings, node: str) -> list[str]:
        """What apply_parts does, one line each (check mode's output)."""
        d = settings.install_dir
        return [line for wanted, line in (
            (self.mark, f"mark {d} as the watchdog's ({MARKER_FILE})"),
            (self.stop, f"stop {UNIT} (its libraries change)"),
            (self.ship_lib, f"ship {d}/lib (sparkrack and its libraries)"),
            (self.make_key, f"make the watchdog's ed25519 key {settings.key_path} on {node}"),
        ) if wanted]

    def paths(self, settings: Settings) -> list[str]:
        """The node's paths they write (for the audit record)."""
        d = settings.install_dir
        return [path for wanted, path in ((self.mark, f"{d}/{MARKER_FILE}"),
                                          (self.ship_lib, f"{d}/lib"),
                                          (self.make_key, settings.key_path)) if wanted]


def lib_current(state: NodeState, manifest_sha256: str) -> bool:
    """Whether the node's lib/ is what would be shipped and every file Python runs checks."""
    return state.lib and state.lib_checks and state.manifest_sha256 == manifest_sha256


def plan_parts(state: NodeState, manifest_sha256: str) -> Parts:
    """What the node needs of the watchdog's own parts (pure)."""
    ship = not lib_current(state, manifest_sha256)
    return Parts(mark=state.install_dir_kind != "marked", ship_lib=ship,
                 stop=ship and state.active,
                 make_key=not state.private_key or not state.public_key)


def apply_parts(fleet, node: str, parts: Parts, library: payload.Library, manifest: str,
                settings: Settings, say: Say) -> str | None:
    """Do parts on node, in order; the public key when one was made."""
    d = settings.install_dir
    for line in parts.steps(settings, node):
        if not line.startswith(("ship ", "make ")):
            say(f"watch.install: {line}")
    if parts.mark:
        run_step(fleet, node, ["sh", "-c", 'umask 022; mkdir -p -- "$1" && printf %s "$3" > '
                               '"$1/$2"', "sh", d, MARKER_FILE, MARKER_TEXT],
                 what="marking the install directory")
    if parts.stop:
        run_step(fleet, node, [settings.systemctl, "stop", UNIT], what="stopping the watchdog")
    if parts.ship_lib:
        tar = library.tar(manifest)
        say(f"watch.install: shipping {d}/lib ({len(library.files)} files, "
            f"{len(tar) / 1e6:.1f} MB compressed: sparkrack and "
            f"{len(library.distributions)} libraries)")
        run_step(fleet, node, ["bash", "-c", text("ship"), "sparkrack-ship", d, settings.python],
                 stdin=tar, timeout=SHIP_TIMEOUT_S, what="unpacking lib/")
    if not parts.make_key:
        return None
    out = run_step(fleet, node, from_root(["env", f"PYTHONPATH={d}/lib", settings.python, "-c",
                                           script("keygen"), settings.key_path,
                                           f"{MARKER}@{node}"]),
                   what="making the watchdog's key")
    public = check_public_key(out.strip().splitlines()[-1])
    say(f"watch.install: made the watchdog's key {settings.key_path} on {node} "
        f"(ed25519; the private key stays there)")
    return public
