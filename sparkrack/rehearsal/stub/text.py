"""Prompt and answer text: tokens as the stub counts them (whitespace-separated words), the
filler words it answers, and the passphrase in the bench's needle-in-a-haystack prompt."""

from __future__ import annotations

import re

NEEDLE = re.compile(r"secret passphrase of the rack is ([A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?)")
WORDS = ("the", "rack", "serves", "one", "model", "across", "eight", "nodes", "and", "every",
         "rank", "holds", "its", "share", "of", "unified", "memory", "while", "tokens", "flow",
         "from", "head", "to", "client", "at", "a", "steady", "rate", "so", "that", "operators",
         "can", "watch", "power", "clocks", "drain", "roll", "lanes", "safely", "under", "load")


def count_tokens(text: str) -> int:
    """Prompt tokens as the stub counts them: whitespace-separated words."""
    return len(text.split())


def message_text(content: object) -> str:
    """A chat message's text: its string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def token_text(index: int, seed: int) -> str:
    """The index-th completion token: a word, with a leading space after the first."""
    word = WORDS[(seed + index * 7) % len(WORDS)]
    return word if index == 0 else " " + word


def passphrase(text: str | None) -> str | None:
    """The passphrase of the needle prompt ("The secret passphrase of the rack is X.") in
    text, or None."""
    found = NEEDLE.search(text) if text else None
    return None if found is None else found.group(1)
