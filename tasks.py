"""sparkrack tasks (`invoke --list`). Thin on purpose: the tasks live in sparkrack.cli."""

from sparkrack.cli import build_namespace

ns = build_namespace()
