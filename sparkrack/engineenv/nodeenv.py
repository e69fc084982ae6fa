"""A node's engine environment as data: each variable's value, source and file (EnvVar),
one node's in one view (NodeEnv), and the env files' KEY=VALUE format read back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkrack.inventory.schema import FrozenMapping

SECRET_KEYS = ("HF_TOKEN",)  # never in an env file; shown as *** if one holds it
VIEW_NODE = "node"  # read from the node's env files
VIEW_INVENTORY = "inventory"  # computed from the inventory, no node contacted


@dataclass(frozen=True)
class EnvVar:
    """One variable a rank gets: its value, where the value came from, and its file."""

    value: str = field(repr=False)
    source: str
    file: str = ""  # the env file on the node ('' for the profile's own variables)


@dataclass(frozen=True)
class NodeEnv:
    """A node's engine environment in one view (VIEW_NODE or VIEW_INVENTORY)."""

    node: str
    view: str
    vars: FrozenMapping  # name -> EnvVar, in file order
    problems: tuple[str, ...] = ()
    # (file, written, probed now) when the one problem is a GID index the node's table no
    # longer has there (it moved at a boot): rewriting the file as provision would fixes it
    gid_moved: tuple[str, str, str] | None = None


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (docker --env-file format: values literal, # comments)."""
    env = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        env[key.strip()] = value
    return env


def read_vars(text: str, file: str, computed: Mapping[str, EnvVar]) -> dict[str, EnvVar]:
    """The variables of one env file as the node holds them, each with the source computed
    for it (computed: the node's variables, compute.py); one sparkrack does not define
    there (a hand edit, an inventory role's own line) says so."""
    sources = {key: var.source for key, var in computed.items() if var.file == file}
    return {key: EnvVar(value, sources.get(key, f"{file} (not sparkrack's: a hand edit or an "
                                                  "inventory role's own line)"), file)
            for key, value in parse_env(text).items()}


def secret_names(env: Mapping[str, EnvVar], declared: Sequence[str]) -> frozenset[str]:
    """The variables of env whose values are never shown."""
    return frozenset(key for key in env if key in declared or key in SECRET_KEYS)
