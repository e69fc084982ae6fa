"""An engine lane: one engine profile resolved for an inventory, its profile file read once.

`up`, `roll` and a roll's restore resolve the engine name they are given into an EngineLane
(`resolve_lane`, `engine_lane`) and pass it down: the gates, the launch specs, the rules,
the memory gate, the readiness wait and the URL the CLI prints all read its fields, none
the profile file again (docs/internals.md#the-engine-resolved-once). A fleet's lanes (what
each rack serves) are racks/capacity.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.engines.option_names import EngineVersion, OptionSet
from sparkrack.engines.profile_file import EngineDef, Profile, load_engine
from sparkrack.engines.serving import Serving
from sparkrack.inventory import Inventory


@dataclass(frozen=True)
class EngineLane:
    """An engine's definition (its profile file, checked against the option table of the
    version its image runs), the chosen profile, and the image that runs instead of the
    inventory's (None: the inventory's, for the definition's image key)."""

    definition: EngineDef
    profile: Profile
    image: str | None = None

    @property
    def engine(self) -> str:
        return self.definition.name

    @property
    def label(self) -> str:
        """engine and profile, as the operator names them: "sglang 512k"."""
        return f"{self.definition.name} {self.profile.name}"

    @property
    def serving(self) -> Serving:
        """What sparkrack reads of the engine running (serving.py)."""
        return self.definition.serving

    @property
    def image_key(self) -> str:
        return self.definition.image_key

    @property
    def options(self) -> OptionSet | None:
        """The option table the profile's flags were checked against."""
        return self.definition.options

    @property
    def version(self) -> EngineVersion | None:
        """The version of the image the options are the table of (None: not asked)."""
        return self.definition.version


def resolve_lane(inventory: Inventory, engine: str, profile: str, *,
                 image: str | None = None) -> EngineLane:
    """engine's profile file for this inventory, read once and checked against the option
    table of `image` (else the inventory's image for it), with its profile chosen.
    UsageError for an unknown engine or profile, InventoryError for a bad file."""
    definition = load_engine(inventory.path, engine, inventory.vars.images, image=image)
    return EngineLane(definition, definition.profile(profile), image)


def engine_lane(inventory: Inventory, engine: str | EngineLane,
                profile: str | None = None) -> EngineLane:
    """A lane resolved already, or engine's profile resolved now (resolve_lane)."""
    if isinstance(engine, EngineLane):
        return engine
    if profile is None:
        raise TypeError("an engine name needs its profile's name")
    return resolve_lane(inventory, engine, profile)
