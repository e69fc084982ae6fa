"""Engine images without a registry: which image ID is right for each ref (pure).

`resolve_images`: the docker-save tar named for the engine on the control machine if
there is one, else the head node's, else the one every node that has the ref agrees on.
Nodes that already hold that ID get nothing; the others get it through the pipelined
chain (sparkrack/transfer/images.py `distribute`).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkrack.facts.docker import normalize_ref
from sparkrack.facts.provision import ProvisionFacts
from sparkrack.transfer.images import ImageTarget, short_id


@dataclass(frozen=True)
class TarImage:
    """The image a docker-save tar holds for a ref."""

    image_id: str
    tags: tuple[str, ...]


_TAR_CACHE: dict[tuple[str, int, int, str], TarImage] = {}


def tar_image(path: str | Path, ref: str) -> TarImage:
    """The ID of ref's image in a docker-save tar (sha256 of its config); ValueError if the
    tar is unreadable or does not hold ref."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as error:
        raise ValueError(f"source tar {path}: {error.strerror}") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns, normalize_ref(ref))
    if key in _TAR_CACHE:
        return _TAR_CACHE[key]
    try:
        with tarfile.open(path, "r:") as tar:
            manifest = json.load(tar.extractfile("manifest.json"))
            wanted = normalize_ref(ref)
            entries = [e for e in manifest
                       if wanted in {normalize_ref(t) for t in e.get("RepoTags") or []}]
            if not entries:
                tags = [t for e in manifest for t in e.get("RepoTags") or []]
                raise ValueError(f"source tar {path} holds {', '.join(tags) or 'no tag'}, "
                                 f"not {ref}")
            config = tar.extractfile(entries[0]["Config"]).read()
    except (OSError, tarfile.TarError, KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"source tar {path}: not a docker-save archive ({error})") from None
    image = TarImage("sha256:" + hashlib.sha256(config).hexdigest(),
                     tuple(entries[0].get("RepoTags") or ()))
    _TAR_CACHE[key] = image
    return image


def resolve_images(wanted: Mapping[str, str], facts: Mapping[str, ProvisionFacts],
                   order: Sequence[str], head: str, *, read_tar=tar_image
                   ) -> dict[str, ImageTarget]:
    """{normalized ref: ImageTarget} for wanted {ref: source tar path or ''}.

    facts holds the gathered nodes (the head among them when it is the source); order is
    the rack's node names by rank.
    """
    targets: dict[str, ImageTarget] = {}
    for ref, tar in wanted.items():
        key = normalize_ref(ref)
        if tar:
            try:
                targets[key] = ImageTarget(key, read_tar(tar, ref).image_id, f"tar:{tar}")
            except ValueError as error:
                targets[key] = ImageTarget(key, None, error=str(error))
            continue
        head_facts = facts.get(head)
        if head_facts is not None and head_facts.images and key in head_facts.images:
            targets[key] = ImageTarget(key, head_facts.images[key], f"node:{head}")
            continue
        holders = {name: facts[name].images[key] for name in order
                   if name in facts and facts[name].images and key in facts[name].images}
        ids = set(holders.values())
        if len(ids) == 1:
            source = next(iter(holders))
            targets[key] = ImageTarget(key, ids.pop(), f"node:{source}")
        elif not ids:
            targets[key] = ImageTarget(key, None, error=(
                f"no node has {key} and no source tar is set: load it on {head} "
                "(docker load < IMAGE.tar) or set image_sources in the inventory"))
        else:
            listing = ", ".join(f"{n}={short_id(i)}" for n, i in holders.items())
            targets[key] = ImageTarget(key, None, error=(
                f"nodes disagree on {key} ({listing}) and the head {head} has none: "
                f"load the right one on {head}"))
    return targets
