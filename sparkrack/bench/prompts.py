"""The prompts that ship with sparkrack (package data in bench/prompts/) and the haystack.

The three single-request prompts of the field report: code, prose, explanation. They ask
for long answers so that the decode phase dominates; the bench also caps every answer at
the suite's token budget and asks the engine to ignore end-of-sequence, so every arm decodes
the same number of tokens.

The needle-in-a-haystack prompt is filler text (bench/prompts/filler.txt, repeated) with one
sentence naming a passphrase placed at a given depth, then the question.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

PROMPT_NAMES = ("code", "prose", "explanation")
NEEDLE_QUESTION = ("What is the secret passphrase of the rack that is mentioned in the text "
                   "above? Reply with the passphrase only.")
_NEEDLE_WORDS = ("amber", "cobalt", "falcon", "granite", "harbor", "juniper", "lantern",
                 "meadow", "orchid", "quartz", "saffron", "tundra", "willow", "zephyr")


@cache
def _text(name: str) -> str:
    return resources.files(__package__).joinpath("prompts", name).read_text(encoding="utf-8")


def load_prompt(name: str) -> str:
    """One of the shipped prompts by name (code, prose, explanation)."""
    if name not in PROMPT_NAMES:
        raise KeyError(f"unknown prompt {name!r} (known: {', '.join(PROMPT_NAMES)})")
    return _text(f"{name}.txt").strip()


def prompts() -> dict[str, str]:
    """{name: text} of the three single-request prompts, in the field report's order."""
    return {name: load_prompt(name) for name in PROMPT_NAMES}


def filler_words() -> list[str]:
    """The haystack's filler, as words (repeated cyclically to any length)."""
    return _text("filler.txt").split()


def passphrase(seed: str) -> str:
    """A deterministic passphrase for a seed, e.g. 'juniper-quartz-4127'."""
    digest = hashlib.sha256(seed.encode()).digest()
    first = _NEEDLE_WORDS[digest[0] % len(_NEEDLE_WORDS)]
    second = _NEEDLE_WORDS[digest[1] % len(_NEEDLE_WORDS)]
    return f"{first}-{second}-{int.from_bytes(digest[2:4], 'big') % 9000 + 1000}"


def needle_sentence(secret: str) -> str:
    return f"The secret passphrase of the rack is {secret}. Remember it."


def haystack(filler_count: int, secret: str, depth: float = 0.5) -> str:
    """filler_count filler words with the needle sentence inserted at depth (0 = start,
    1 = end, at a sentence boundary where one is near), then the question."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError("depth must be within 0..1")
    words = filler_words()
    body = [words[i % len(words)] for i in range(max(0, filler_count))]
    at = round(len(body) * depth)
    for back in range(min(at, 60)):  # prefer just after a full stop
        if body[at - back - 1].endswith("."):
            at -= back
            break
    text = " ".join(body[:at] + [needle_sentence(secret)] + body[at:])
    return f"{text}\n\n{NEEDLE_QUESTION}"


def found(answer: str, secret: str) -> bool:
    """Whether an answer names the passphrase (case, spaces and punctuation ignored)."""
    def norm(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())
    return norm(secret) in norm(answer)
