"""`python -m sparkrack TASK`: the `sparkrack` command (sparkrack.cli.main), for a venv whose
scripts are not on PATH (docs/internals.md#installed-as-a-tool)."""

from sparkrack.cli import main

main(binary="python -m sparkrack")
