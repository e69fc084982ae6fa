"""copy: a file holding the content the task gives (a string; no template), with mode
and owner: what a caller computed, such as the watchdog's copy of the inventory.

Written as template writes (files.write_content). Absent mode removes the file.
"""

from __future__ import annotations

from sparkrack.provision.modules.base import Step
from sparkrack.provision.modules.fileops import file_writer


def given(step: Step) -> bytes:
    """The task's `content`."""
    content = step.params["content"]
    return content if isinstance(content, bytes) else str(content).encode()


MODULE = file_writer("copy", "content", given)
