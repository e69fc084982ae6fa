"""`bench.compare --plot FILE`: every measure of two runs side by side, one panel each (the
measures have their own units and scales): A's bar and B's, each with its value, and the
tie band, A's value within 3 % (measure.TIE_PCT) either way, shaded across the panel; B's bar
ending inside it is a tie. The verdict heads the panel. SVG or PNG, as FILE's extension says.

matplotlib is an optional extra (`pip install 'sparkrack[plot]'`), imported here only when a
plot is asked for: the base install and every other task stay without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from sparkrack.bench.compare import CompareRow
from sparkrack.bench.measure import TIE_PCT
from sparkrack.bench.result import show
from sparkrack.core.errors import UsageError

FORMATS = {".svg": "svg", ".png": "png"}
COLUMNS = 4  # panels per row
COLORS = ("#4C72B0", "#DD8452")  # A, B
TIE_COLOR = "#8C8C8C"


def plot_format(path: str) -> str:
    """The format FILE's extension names; UsageError for any other."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise UsageError(f"--plot {path}: the file must end in .svg or .png",
                         fix="e.g. --plot compare.svg")
    return fmt


def drawable(row: CompareRow) -> bool:
    """A measure with a number in at least one run (pass/fail rows are the table's)."""
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in (row.a, row.b))


def plot(table: Sequence[CompareRow], names: tuple[str, str], path: str,
         tie_pct: float = TIE_PCT, title: str = "") -> list[str]:
    """Write the plot of table's measures to path; the labels of those it leaves out."""
    fmt = plot_format(path)
    try:
        import matplotlib
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise UsageError("--plot needs matplotlib, an optional extra",
                         fix="pip install 'sparkrack[plot]'") from None
    shown = [row for row in table if drawable(row)]
    left_out = [row.label for row in table if not drawable(row)]
    if not shown:
        raise UsageError("--plot: neither run has a measure with a number to draw")
    rows = math.ceil(len(shown) / COLUMNS)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sparkrack",
                                "font.size": 9}):
        figure = Figure(figsize=(3.2 * COLUMNS, 2.7 * rows + 0.9), layout="constrained")
        axes = figure.subplots(rows, COLUMNS, squeeze=False).flatten()
        for ax, row in zip(axes, shown, strict=False):
            _panel(ax, row, names, tie_pct)
        for ax in axes[len(shown):]:
            ax.set_axis_off()
        figure.legend(handles=[Patch(color=COLORS[0], label=f"A: {names[0]}"),
                               Patch(color=COLORS[1], label=f"B: {names[1]}"),
                               Patch(color=TIE_COLOR, alpha=0.3,
                                     label=f"tie: within {tie_pct:g}% of A")],
                      loc="outside lower center", ncols=3, frameon=False)
        heading = title or f"bench.compare: A = {names[0]}, B = {names[1]}"
        if left_out:
            heading += "\nin the table only: " + ", ".join(left_out)
        figure.suptitle(heading)
        figure.savefig(path, format=fmt, dpi=110,
                       metadata={"Date": None} if fmt == "svg" else {"Software": None})
    return left_out


def _panel(ax, row: CompareRow, names: tuple[str, str], tie_pct: float) -> None:
    """One measure: A's and B's bars, their values, the tie band around A, the verdict."""
    values = [v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
              for v in (row.a, row.b)]
    for x, (value, color, which) in enumerate(zip(values, COLORS, "ab", strict=False)):
        if value is None:
            ax.text(x, 0, "not measured", ha="center", va="bottom", fontsize=7, rotation=90)
            continue
        ax.bar([x], [value], width=0.6, color=color, gid=f"bar-{row.key}-{which}")
        ax.annotate(show(float(value), row.unit), (x, value), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8)
    if values[0] is not None:
        band = abs(values[0]) * tie_pct / 100
        ax.axhspan(values[0] - band, values[0] + band, color=TIE_COLOR, alpha=0.3, lw=0,
                   gid=f"tie-{row.key}")
    ax.set_xticks([0, 1], ["A", "B"])
    ax.set_xlim(-0.6, 1.6)
    top = max(v for v in values if v is not None)
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.set_title(f"{row.label}" + (f" ({row.unit})" if row.unit else ""), fontsize=9)
    verdict = {"tie": "tie", names[0]: "A ahead", names[1]: "B ahead"}.get(row.verdict,
                                                                          row.verdict)
    pct = f", B - A {row.pct:+.1f}%" if row.pct is not None else ""
    ax.text(0.5, 0.97, verdict + pct, transform=ax.transAxes, ha="center", va="top",
            fontsize=8, gid=f"verdict-{row.key}")
    ax.spines[["top", "right"]].set_visible(False)
