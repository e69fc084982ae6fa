"""copy: a file holding the content the task gives (a string; no template), with mode
and owner: what a caller computed, such as the watchdog's copy of the inventory.

Written as template writes (files.write_content). Absent mode removes the file.
"""

from __future__ import annotations

from sparkrack.provision.modules.base import Step
from sparkrack.provision.modules.fileops import file_writer
from sparkrack.provision.modules.params import Param

PARAMS = {  # and fileops.WRITTEN's: dest, mode, owner, group, secret_keys
    "content": Param("str", "what the file holds, taken as it is (no template file)",
                     "installed by sparkrack", required=True),
}


def given(step: Step) -> bytes:
    """The task's `content`."""
    return str(step.params["content"]).encode()


MODULE = file_writer("copy", PARAMS, given)
