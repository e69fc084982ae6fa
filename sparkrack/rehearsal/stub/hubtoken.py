"""The Hugging Face token as huggingface_hub reads it (stdlib only; runs inside the stub image).

huggingface_hub's `get_token` (utils/_auth.py; HF_TOKEN_PATH since 0.23.0, constants.py):
1. $HF_TOKEN, else $HUGGING_FACE_HUB_TOKEN (an empty value counts as unset);
2. the file at $HF_TOKEN_PATH, else $HF_HOME/token ($HF_HOME: else
   $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface). A missing file is no token; any
   other error reading it (a folder, a file the rank may not read) is raised, as there;
3. the value with CR and LF removed and spaces stripped; empty is no token.

A stub lane whose settings name a gated repo (`gated_repo`, config.py) reads the token this
way when it starts, and fails as the engine does when it has none (`gated_error`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # read first, in this order


def token_path(env: Mapping[str, str]) -> str:
    """Where huggingface_hub looks for the token file under env (its constants.py)."""
    cache = env.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    home = _expand(env.get("HF_HOME", os.path.join(cache, "huggingface")))
    return _expand(env.get("HF_TOKEN_PATH", os.path.join(home, "token")))


def hub_token(env: Mapping[str, str]) -> str | None:
    """The token huggingface_hub would use under env, or None. OSError (other than a missing
    file) propagates."""
    token = _clean(env.get(ENV[0]) or env.get(ENV[1]))
    if token:
        return token
    try:
        with open(token_path(env), encoding="utf-8") as handle:
            return _clean(handle.read())
    except FileNotFoundError:
        return None


def gated_error(repo: str) -> str:
    """What huggingface_hub raises for a gated repo asked without a token (HTTP 401)."""
    return (f"huggingface_hub.errors.GatedRepoError: 401 Client Error.\n\nCannot access gated "
            f"repo for url https://huggingface.co/{repo}/resolve/main/config.json.\nAccess to "
            f"model {repo} is restricted. You must have access to it and be authenticated to "
            "access it. Please log in.")


def _expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def _clean(token: str | None) -> str | None:
    if token is None:
        return None
    return token.replace("\r", "").replace("\n", "").strip() or None
