"""Scripts that run on the nodes, as real files shipped with the package (stdlib only), and
the text each goes as: `script(name)` composes NAME.py with the parts it imports,
`text(name)` is NAME.sh as it is. Every file and how it runs:
docs/internals.md#the-node-scripts.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_PART = re.compile(r"^from \.(\w+) import (?:\([^)]*\)|.*)$", re.MULTILINE)


@cache
def script(name: str) -> str:
    """The text of remote/NAME.py, self-contained: its parts first, once each."""
    done: list[str] = []
    texts: list[str] = []

    def add(part: str) -> None:
        if part in done:
            return
        text = resources.files(__package__).joinpath(f"{part}.py").read_text()
        for needed in _PART.findall(text):
            add(needed)
        done.append(part)
        texts.append(_PART.sub("", text))

    add(name)
    return "\n".join(texts)


def argv(python: str, name: str, *args: str) -> list[str]:
    """The argv that runs remote/NAME.py with args by the node's python."""
    return [python, "-c", script(name), *args]


@cache
def text(name: str) -> str:
    """The text of remote/NAME.sh as it is (a shell script: `sh -c TEXT NAME args...`)."""
    return resources.files(__package__).joinpath(f"{name}.sh").read_text()
