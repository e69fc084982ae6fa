"""template: a file rendered from the role's templates/ (Jinja2), with mode and owner.

Written as the copy module writes its content (files.write_content). Absent mode removes
the file.
"""

from __future__ import annotations

from sparkrack.provision.modules.base import Step
from sparkrack.provision.modules.fileops import file_writer
from sparkrack.provision.modules.params import Param

PARAMS = {  # and fileops.WRITTEN's: dest, mode, owner, group, secret_keys
    "src": Param("str", "the template, a file under the role's templates/", "nccl.env.j2",
                 required=True),
}


def rendered(step: Step) -> bytes:
    """The role's template `src`, rendered with the node's vars."""
    return step.renderer.template(step.role, str(step.params["src"]), step.context).encode()


MODULE = file_writer("template", PARAMS, rendered)
