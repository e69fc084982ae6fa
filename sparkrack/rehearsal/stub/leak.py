"""The SGLang DSA indexer's scratch memory, as the field report describes it (stdlib only):
ratchet without the budget, bounded with it (the model: docs/rehearsal.md#the-stub-engines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ENV = "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"
DEFAULT_FRACTION = 0.2  # sglang/srt/environ.py
RATCHET_FROM = 0.1  # a budget at or above this keeps the blocks (the field report's bug)
FP32 = 4


def budget_fraction(value: str | None) -> float:
    """The env var's value as SGLang reads it (missing: the default 0.2); ValueError if bad."""
    if value is None or value.strip() == "":
        return DEFAULT_FRACTION
    fraction = float(value)
    if not 0 <= fraction <= 1:
        raise ValueError(f"{ENV} must be in [0, 1], got {value!r}")
    return fraction


def ratchets(fraction: float) -> bool:
    """Whether a rank with this budget keeps its scratch (the leak)."""
    return fraction >= RATCHET_FROM


def budget_bytes(fraction: float, mem_fraction_static: float, total_bytes: int) -> int:
    """The largest scratch block: fraction x (1 - mem_fraction_static) x the device."""
    return int(fraction * max(0.0, 1.0 - mem_fraction_static) * total_bytes)


def block_sizes(prompt_tokens: int, chunk: int, cap: int, scale: float = 1.0) -> list[int]:
    """Bytes of each prefill chunk's fp32 logits block for one prompt, each capped at cap."""
    sizes = []
    for index in range(math.ceil(prompt_tokens / chunk) if prompt_tokens > 0 else 0):
        rows = min(chunk, prompt_tokens - index * chunk)
        columns = min(prompt_tokens, (index + 1) * chunk)
        sizes.append(int(min(rows * columns * FP32, cap) * scale))
    return sizes


@dataclass
class IndexerScratch:
    """One rank's scratch bookkeeping: what to allocate before and free after a request."""

    fraction: float
    chunk: int
    cap: int  # budget_bytes(...)
    scale: float = 1.0
    longest: int = 0  # longest prompt seen (ratchet mode)
    held: int = 0  # bytes kept between requests (ratchet mode)

    @property
    def ratchets(self) -> bool:
        return ratchets(self.fraction)

    def kept_for(self, prompt_tokens: int) -> int:
        """Bytes kept after the longest prompt was prompt_tokens (ratchet mode)."""
        return sum(block_sizes(prompt_tokens, self.chunk, self.cap, self.scale))

    def begin(self, prompt_tokens: int) -> tuple[int, int]:
        """(bytes to keep from now on, bytes to take for this request only) for a prompt."""
        if self.ratchets:
            if prompt_tokens <= self.longest:
                return 0, 0
            grow = self.kept_for(prompt_tokens) - self.held
            self.longest, self.held = prompt_tokens, self.held + grow
            return grow, 0
        blocks = block_sizes(prompt_tokens, self.chunk, self.cap, self.scale)
        return 0, max(blocks, default=0)
