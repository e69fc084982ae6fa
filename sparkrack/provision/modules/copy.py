"""copy: a file holding the content the task gives (a string; no template), with mode
and owner: what a caller computed, such as the watchdog's copy of the inventory.

Written as template writes (files.write_content). Absent mode removes the file.
"""

from __future__ import annotations

from sparkrack.provision.changes import Change
from sparkrack.facts.files import file_query
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.files import remove_file, write_content


def plan(step: Step) -> Change:
    """The write (or chmod/chown) that makes dest hold content."""
    dest = str(step.params["dest"])
    if step.state.absent:
        return remove_file(step.base, dest, step.facts.file(dest), step.state)
    content = step.params["content"]
    return write_content(step, dest, content if isinstance(content, bytes)
                         else str(content).encode())


MODULE = Module(
    name="copy",
    required=frozenset({"content", "dest"}),
    optional=frozenset({"mode", "owner", "group", "secret_keys"}),
    queries=lambda p: [file_query(str(p["dest"]))],
    plan=plan,
)
