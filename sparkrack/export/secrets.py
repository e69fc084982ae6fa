"""An exported lane's secrets (the engine file's `secret_env`: HF_TOKEN) as files, never in
the container's environment: the Secret is a volume, each key a read-only 0400 file under
DIRECTORY, and the variable the engine's libraries read names the file (HF_TOKEN_PATH:
huggingface_hub reads the token there when HF_TOKEN is unset).

When the inventory says the model needs a token (`hf_token_required`), the volume is not
optional: without the Secret, or without its key, the kubelet does not start the pod and
says which (`MountVolume.SetUp failed ... secret "NAME" not found`). Otherwise it is
optional, as on the rack, where a node's env file carries the token only when the
operator had one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sparkrack.core.errors import UsageError

DIRECTORY = "/var/run/secrets/sparkrack"
VOLUME = "secrets"
PATH_VARIABLE = {"HF_TOKEN": "HF_TOKEN_PATH"}  # the secret -> the variable naming its file


@dataclass(frozen=True)
class SecretFiles:
    """The Secret's keys as files: the env, the volume and its mount for the engine."""

    secret_name: str
    keys: tuple[str, ...]
    required: bool

    @property
    def env(self) -> list[dict[str, str]]:
        return [{"name": PATH_VARIABLE[key], "value": f"{DIRECTORY}/{key}"} for key in self.keys]

    @property
    def volumes(self) -> list[dict[str, Any]]:
        if not self.keys:
            return []
        return [{"name": VOLUME, "secret": {
            "secretName": self.secret_name, "defaultMode": 0o400,
            "items": [{"key": key, "path": key} for key in self.keys],
            "optional": not self.required}}]

    @property
    def mounts(self) -> list[dict[str, Any]]:
        return [{"name": VOLUME, "mountPath": DIRECTORY, "readOnly": True}] if self.keys else []


def secret_files(secret_env: Iterable[str], secret_name: str, required: bool,
                 engine_file: str) -> SecretFiles:
    """SecretFiles for secret_env; UsageError for a secret no variable can point at."""
    keys = tuple(secret_env)
    for key in keys:
        if key not in PATH_VARIABLE:
            raise UsageError(f"{engine_file}: secret_env {key} has no file form for Kubernetes",
                             fix=f"the export mounts only {', '.join(PATH_VARIABLE)} (read "
                             "through " + ", ".join(PATH_VARIABLE.values()) + ")")
    return SecretFiles(secret_name, keys, required)
