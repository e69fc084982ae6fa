"""template: a file rendered from the role's templates/ (Jinja2), with mode and owner.

Written as the copy module writes its content (files.write_content). Absent mode removes
the file.
"""

from __future__ import annotations

from sparkrack.provision.changes import Change
from sparkrack.facts.files import file_query
from sparkrack.provision.modules.base import Module, Step
from sparkrack.provision.modules.files import remove_file, write_content


def plan(step: Step) -> Change:
    """The write (or chmod/chown) that makes dest the rendered template."""
    dest = str(step.params["dest"])
    if step.state.absent:
        return remove_file(step.base, dest, step.facts.file(dest), step.state)
    text = step.renderer.template(step.role, str(step.params["src"]), step.context)
    return write_content(step, dest, text.encode())


MODULE = Module(
    name="template",
    required=frozenset({"src", "dest"}),
    optional=frozenset({"mode", "owner", "group", "secret_keys"}),
    queries=lambda p: [file_query(str(p["dest"]))],
    plan=plan,
)
