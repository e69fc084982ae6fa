"""The rack tests' one way to put a stub engine image on a node: `docker load` of the tar
sparkrack.rehearsal.stubimage built, through the node's dockerd (not part of the package:
moving images onto a rack is the provisioning role's job, docs/rehearsal.md#the-stub-images).
"""

import io
import json
import tarfile
from pathlib import Path

from sparkrack.rehearsal.stubimage import StubImageError


def load_stub_image(fleet, node: str, path: Path | str, image_id: str) -> bool:
    """Load the tar at path into node's dockerd unless image_id is already there; True if
    it loaded. A previous stub image that the load untagged is removed (unless a container
    still uses it). StubImageError if dockerd reports another ID than image_id."""
    import docker.errors

    client = fleet.docker_client(node)
    try:
        if client.images.get(image_id).id == image_id:
            return False
    except docker.errors.ImageNotFound:
        pass
    data = Path(path).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        ref = json.loads(tar.extractfile("manifest.json").read())[0]["RepoTags"][0]
    try:
        previous = client.images.get(ref)
    except docker.errors.ImageNotFound:
        previous = None
    images = client.images.load(data)
    ids = {image.id for image in images}
    if ids != {image_id}:
        raise StubImageError(f"{node}: docker load of {path} gave {sorted(ids)}, expected "
                             f"{image_id}")
    if previous is not None and previous.id != image_id and \
            (previous.labels or {}).get("org.sparkrack.stub"):
        try:
            client.images.remove(previous.id)
        except docker.errors.APIError:
            pass  # still used by a container: docker keeps it
    return True
