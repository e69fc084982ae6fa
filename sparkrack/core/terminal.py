"""Text from the nodes made safe for the operator's terminal.

Engine logs and command output are written by whatever runs on a node. A control character
in them is an instruction to the terminal, not text: ESC starts sequences that move the
cursor, rewrite what was shown, set the window title or (OSC 52) the operator's clipboard;
CR overwrites a line; the C1 characters (CSI U+009B, ...) do the same on some terminals.
`escape_controls` writes every control character but tab and newline as a visible escape
(`\\x1b`), so the line reads as what was printed. `invoke logs` and `invoke run` show node
text through it unless `--raw`; `console.say` always does.
"""

from __future__ import annotations

import unicodedata

KEPT = "\t\n"
# every control character (Unicode category Cc: C0, DEL, C1) but tab and newline
_ESCAPES = {code: f"\\x{code:02x}" for code in range(0xA0)
            if unicodedata.category(chr(code)) == "Cc" and chr(code) not in KEPT}


def escape_controls(text: str) -> str:
    """text with its control characters (tab and newline excepted) as `\\xHH` escapes."""
    return text.translate(_ESCAPES)
