"""Helpers for the provisioning tests and benchmarks/provision.py (not part of the package).

- `write_image_tar`: a small deterministic docker-save archive (one layer holding one
  file), so image distribution can be tested without a registry or the engine images.
- `snapshot`: what provisioning can touch on nodes, in one round trip per node, to show
  that a run (or a --check run) left them exactly as they were.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import tempfile
from pathlib import Path

from sparkrack.fleet import Fleet, sh
from sparkrack.inventory import Inventory, Node

EPOCH = 1704067200  # 2024-01-01T00:00:00Z


def write_image_tar(path: str | Path, ref: str, size: int = 1 << 20, seed: int = 0) -> str:
    """Write a docker-save tar of one image tagged ref whose one layer holds `payload.bin`
    (size pseudo-random bytes from seed); returns the image ID."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as layer:
        digest = _write_layer(layer, size, seed)
        layer_size = layer.tell()
        layer.seek(0)
        config = json.dumps({
            "architecture": "amd64", "os": "linux",
            "config": {"Cmd": ["/payload.bin"], "Labels": {"sparkrack.test": ref}},
            "created": "2024-01-01T00:00:00Z",
            "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "sparkrack test"}],
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest}"]},
        }, sort_keys=True, separators=(",", ":")).encode()
        image_id = hashlib.sha256(config).hexdigest()
        manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": [ref],
                                "Layers": [f"{digest}/layer.tar"]}]).encode()
        name, _, tag = ref.rpartition(":")
        repositories = json.dumps({name: {tag: digest}}).encode()
        temporary = path.with_name(path.name + ".tmp")
        with tarfile.open(temporary, "w", format=tarfile.GNU_FORMAT) as tar:
            _add(tar, f"{image_id}.json", io.BytesIO(config), len(config))
            _add(tar, f"{digest}/VERSION", io.BytesIO(b"1.0"), 3)
            _add(tar, f"{digest}/layer.tar", layer, layer_size)
            _add(tar, "manifest.json", io.BytesIO(manifest), len(manifest))
            _add(tar, "repositories", io.BytesIO(repositories), len(repositories))
        temporary.replace(path)
    return f"sha256:{image_id}"


def _write_layer(out, size: int, seed: int) -> str:
    """A layer tar with payload.bin into out; returns its sha256 hex."""
    hasher = hashlib.sha256()

    class Hashing:
        def write(self, data: bytes) -> int:
            hasher.update(data)
            return out.write(data)

        def tell(self) -> int:
            return out.tell()

    rng = random.Random(seed)
    with tarfile.open(fileobj=Hashing(), mode="w|", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("payload.bin")
        info.size, info.mtime, info.mode = size, EPOCH, 0o644
        tar.addfile(info, _Random(rng, size))
    return hasher.hexdigest()


class _Random:
    """A file-like object yielding size pseudo-random bytes."""

    def __init__(self, rng: random.Random, size: int):
        self.rng, self.left = rng, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return self.rng.randbytes(n)


def _add(tar: tarfile.TarFile, name: str, data, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, EPOCH, 0o644
    tar.addfile(info, data)


SNAPSHOT_SCRIPT = r"""
for p in "$@"; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    find "$p" -printf '%p %y %m %U:%G %s %T@\n' 2>/dev/null | sort
    find "$p" -type f -exec sha256sum {} + 2>/dev/null | sort
  else
    printf '%s absent\n' "$p"
  fi
done
systemctl show sparkrack-clock-cap.service containerd.service docker.service \
  -p Id,LoadState,ActiveState,UnitFileState,ActiveEnterTimestampMonotonic,DropInPaths
docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' | sort
"""

SNAPSHOT_PATHS = ("/etc/sparkrack", "/etc/systemd/system/sparkrack-clock-cap.service",
                  "/etc/systemd/system/multi-user.target.wants",
                  "/etc/systemd/system/containerd.service.d",
                  "/etc/security/limits.d", "/etc/docker")


def snapshot(inventory: Inventory, nodes: list[Node] | None = None) -> dict[str, str]:
    """{node: text} describing every file, unit and image provisioning can touch."""
    with Fleet(inventory, nodes) as fleet:
        results = fleet.run(sh(SNAPSHOT_SCRIPT, *SNAPSHOT_PATHS))
    results.raise_for_failures()
    return {r.node: r.stdout for r in results}


def inventory_copy(source: str | Path, dest: str | Path, **overrides) -> Inventory:
    """A copy of the inventory at source in dest with some rack vars replaced; loaded."""
    import shutil

    import yaml

    from sparkrack.inventory import load_inventory

    source, dest = Path(source), Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest)
    all_vars = dest / "group_vars" / "all.yml"
    data = yaml.safe_load(all_vars.read_text()) or {}
    data.update(overrides)
    all_vars.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(dest)


def failures(report) -> list[str]:
    """A provision report's failures, one line each (node, error or role/task and why): the
    message of an assertion on its exit code."""
    lines = []
    for run in report.nodes:
        if run.error:
            lines.append(f"{run.node} {run.status}: {run.error}")
        lines += [f"{run.node}: {c.role}/{c.task}: {c.summary}" for c in run.outcomes()
                  if c.status == "failed"]
    return lines
