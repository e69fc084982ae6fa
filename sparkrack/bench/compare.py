"""Two saved bench runs side by side: every measure, its difference, and who is ahead.

The first run (A) is the baseline: delta = B - A and percent = (B - A) / A. A difference
within 3 % of A is a tie, as the field report treats one-boot measurements ("treat
anything inside about 3% as a tie"). For pass/fail rows (the needle) equal is a tie.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.bench.measure import TIE_PCT, delta_pct, is_tie
from sparkrack.bench.result import BenchResult, Row, rows, show


@dataclass(frozen=True)
class CompareRow:
    """One measure of both runs."""

    key: str
    label: str
    unit: str
    a: object
    b: object
    delta: float | None  # B - A (numbers only)
    pct: float | None  # (B - A) / A in percent
    verdict: str  # "tie", the name of the run ahead, "differs", or "only in A/B", "-"

    def cells(self) -> list[str]:
        if self.delta is None:
            delta = "-"
        else:
            digits = 3 if self.unit == "s" else 2
            delta = f"{self.delta:+.{digits}f}"
            if self.pct is not None:
                delta += f" ({self.pct:+.1f}%)"
        return [self.label, show(self.a, self.unit), show(self.b, self.unit), delta, self.verdict]


HEADER_FIELDS = ("engine", "profile", "deployment_id", "image_id", "spec_hash")


def header(a: BenchResult, b: BenchResult) -> list[list[str]]:
    """[field, A, B] lines: what each run measured (engine, profile, image ID, spec hash,
    date, suite) so that a compare never hides which lanes it compares."""
    lines = []
    for name in HEADER_FIELDS:
        lines.append([name, str(a.deployment.get(name, "-")), str(b.deployment.get(name, "-"))])
    lines.append(["date", a.date, b.date])
    lines.append(["suite", a.suite + (" (partial)" if a.partial else ""),
                  b.suite + (" (partial)" if b.partial else "")])
    return lines


def compare(a: BenchResult, b: BenchResult, *, tie_pct: float = TIE_PCT,
            names: tuple[str, str] | None = None) -> list[CompareRow]:
    """Every measure of either run, in A's order then B's extras, with delta and verdict."""
    name_a, name_b = names or (a.name, b.name)
    if name_a == name_b:
        name_a, name_b = "A", "B"
    rows_a = {r.key: r for r in rows(a)}
    rows_b = {r.key: r for r in rows(b)}
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    return [_row(rows_a.get(k), rows_b.get(k), name_a, name_b, tie_pct) for k in keys]


def _row(ra: Row | None, rb: Row | None, name_a: str, name_b: str, tie_pct: float) -> CompareRow:
    ref = ra or rb
    va = ra.value if ra else None
    vb = rb.value if rb else None
    label = ref.label
    if ra is not None and rb is not None and ra.label != rb.label:
        label = f"{ra.label} / {rb.label}"
    if ra is None or rb is None:
        which = name_a if rb is None else name_b
        return CompareRow(ref.key, label, ref.unit, va, vb, None, None, f"only in {which}")
    if ref.better == "pass" or isinstance(va, bool) or isinstance(vb, bool):
        if va is None or vb is None:
            verdict = "-"
        elif va == vb:
            verdict = "tie"
        else:
            verdict = name_a if va else name_b
        return CompareRow(ref.key, label, ref.unit, va, vb, None, None, verdict)
    if not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
        verdict = "-" if va is None or vb is None else ("tie" if va == vb else "differs")
        return CompareRow(ref.key, label, ref.unit, va, vb, None, None, verdict)
    delta, pct = vb - va, delta_pct(va, vb)
    if is_tie(va, vb, tie_pct):
        verdict = "tie"
    elif ref.better == "lower":
        verdict = name_a if va < vb else name_b
    elif ref.better == "higher":
        verdict = name_a if va > vb else name_b
    else:
        verdict = "differs"
    return CompareRow(ref.key, label, ref.unit, va, vb, delta, pct, verdict)
