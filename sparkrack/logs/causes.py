"""What a failed rank's reason means when the log line alone does not say it: each known
cause a pattern of the line and the one sentence an operator needs
(docs/engines.md#failure; the facts: docs/field-notes.md#known-failures-on-sm121).
"""

from __future__ import annotations

import re

# (pattern of the reason line, what happened and the fix)
KNOWN = (
    (re.compile(r"ibv_reg_mr\w* failed with error Cannot allocate memory"),
     "memory registration failed (ibv_reg_mr: ENOMEM) on {node}: a host kernel with Kexec "
     "HandOver on (CmaFree above CmaTotal in its /proc/meminfo) pins no more memory once "
     "about 108 GiB is committed, after the weights load; boot it with kho=off"),
)


def known_cause(reason: str | None, node: str) -> str | None:
    """The sentence for the first known cause reason matches, or None."""
    for pattern, sentence in KNOWN:
        if reason and pattern.search(reason):
            return sentence.format(node=node)
    return None
