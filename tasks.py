"""sparkrack tasks (`invoke --list`) in a checkout. Thin on purpose: the tasks live in
sparkrack.cli, whose `sparkrack` command serves the same collection where sparkrack is
installed without this file."""

from sparkrack.cli import build_namespace

ns = build_namespace()
