"""Text from the nodes made safe for the operator's terminal.

Engine logs and command output are written by whatever runs on a node. A control character
in them is an instruction to the terminal, not text: ESC starts sequences that move the
cursor, rewrite what was shown, set the window title or (OSC 52) the operator's clipboard;
CR overwrites a line; the C1 characters (CSI U+009B, ...) do the same on some terminals.
`escape_controls` writes every control character but tab and newline as a visible escape
(`\\x1b`), so the line reads as what was printed. `invoke logs` and `invoke run` show node
text through it unless `--raw`; `console.say` always does.

`for_terminal` breaks a task's closing line (its error) at spaces to the width of the
terminal it goes to: a terminal breaks a long line at its last column, mid-word.
"""

from __future__ import annotations

import os
import textwrap
import unicodedata

KEPT = "\t\n"
# every control character (Unicode category Cc: C0, DEL, C1) but tab and newline
_ESCAPES = {code: f"\\x{code:02x}" for code in range(0xA0)
            if unicodedata.category(chr(code)) == "Cc" and chr(code) not in KEPT}


def escape_controls(text: str) -> str:
    """text with its control characters (tab and newline excepted) as `\\xHH` escapes."""
    return text.translate(_ESCAPES)


INDENT = "  "  # a wrapped line's continuation lines


def wrap(text: str, width: int) -> str:
    """text broken at spaces into lines of at most width columns, continuation lines
    indented; a word longer than a line stands whole on its own (never cut)."""
    return "\n".join(textwrap.wrap(text, width=max(width, 20), subsequent_indent=INDENT,
                                    break_long_words=False, break_on_hyphens=False,
                                    drop_whitespace=True)) or text


def for_terminal(text: str, stream) -> str:
    """text wrapped to stream's terminal width when stream is a terminal; as it is when it is
    a pipe or a file (one line per error, for scripts and grep)."""
    try:
        if not stream.isatty():
            return text
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return text
    return "\n".join(wrap(line, width - 1) for line in text.split("\n"))  # not to the edge
