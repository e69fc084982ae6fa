"""The images a node's dockerd holds (ref -> image ID), refs normalized as docker does: IMAGES
asks them (dockerd.py's `images_section` answers, `parse_images` reads)."""

from __future__ import annotations

from sparkrack.facts.queries import Fact
from sparkrack.remote.dockerd import images_section


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


def parse_images(lines: list[str]) -> tuple[dict[str, str] | None, str | None]:
    """One `images_section`'s lines: ({ref: ID}, None) or (None, the docker error)."""
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


IMAGES = Fact(images_section, parse_images).query()
