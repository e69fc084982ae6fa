"""Exported objects as YAML: one multi-document text, or one file per object and a
`kustomization.yaml` that lists them (`kubectl apply -k DIR` takes the whole set).

A file is named `<kind>-<name>.yaml` (lower case) and written atomically (a temporary file
beside it, then renamed), so `kubectl apply -f DIR` never reads half a manifest. The
kustomization names no namespace: every namespaced object carries its own (the export's
one place for it), so `kubectl apply -k DIR -n OTHER` is refused by kubectl instead of
half-moving the set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION = "kustomization.yaml"


def manifest_yaml(objects: Iterable[dict[str, Any]]) -> str:
    """The objects as one YAML stream, `---` before each."""
    return "".join("---\n" + _yaml(obj) for obj in objects)


def write_manifests(objects: Iterable[dict[str, Any]], folder: Path) -> list[Path]:
    """Write each object to folder/<kind>-<name>.yaml and the kustomization.yaml listing
    them (folder created if missing); the paths, the kustomization last."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [_write(folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml", obj)
             for obj in objects]
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [path.name for path in paths]}
    return [*paths, _write(folder / KUSTOMIZATION, kustomization)]


def _write(path: Path, obj: dict[str, Any]) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(_yaml(obj))
    os.replace(tmp, path)
    return path


def _yaml(obj: dict[str, Any]) -> str:
    """One object as block-style YAML, keys in the order they were built."""
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=100)
