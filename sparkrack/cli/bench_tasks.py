"""Measure the running deployment; compare saved runs.

The `bench` collection: `invoke bench` (its default task) measures the running deployment
with the field report's method; `invoke bench.compare A B` puts two saved runs side by side
(ties within 3 %)."""

from invoke.exceptions import Exit

from sparkrack.cli.common import INVENTORY_HELP, inventory_from, operator_task
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = "bench"


def _int(value, flag: str):
    from sparkrack.core.errors import UsageError

    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} must be a whole number, got {value!r}") from None


@task(default=True, help={
    "suite": "quick (1 round, 128 tokens, no needle unless --context) or full (default: "
             "3 rounds of 512 tokens, medians of three, needle at 131072 if served)",
    "save": "name of the saved result (default: ENGINE-PROFILE-SUITE-DATE)",
    "context": "needle-in-a-haystack prompt length in tokens, e.g. 131072 (0: no needle)",
    "tokens": "decoded tokens per request (default: the suite's)",
    "inventory": INVENTORY_HELP, "json": "print the result as JSON"})
@operator_task
def bench(c, suite="full", save=None, context=None, tokens=None, inventory=None, json=False):
    """Measure the running deployment as the field report does.

    Three prompts (code, prose, explanation) one at a time, median decode tok/s of three,
    TTFT apart; four users at once; needle in a haystack; speculative accept length. The
    result is saved beside the deployment record on the head (and here). Ctrl-C stops and
    keeps what was measured."""
    from sparkrack.bench import rows, run_bench
    from sparkrack.bench.result import show

    rack = inventory_from(inventory)
    with console.Waiting(f"bench ({suite})") as waiting:
        outcome = run_bench(rack, suite=suite, name=save, context=_int(context, "--context"),
                            max_tokens=_int(tokens, "--tokens"), on_progress=waiting.update,
                            on_event=console.say)
    result = outcome.result
    if json:
        console.print_json(result.as_dict())
    else:
        if not console.out.is_terminal:  # the plain table has no title: say what it is
            console.say(result.title())
        console.print_table(result.title(), ["measure", "value", "detail"],
                            [[r.label, show(r.value, r.unit), r.detail] for r in rows(result)])
        for note in result.notes:
            console.say(f"note: {note}")
    where = outcome.remote_path and f"{rack.head.name}:{outcome.remote_path}"
    console.say(f"saved {result.name}: {outcome.local_path}" + (f" and {where}" if where else ""))
    if outcome.save_error:
        console.say(f"warning: not saved on the head: {outcome.save_error}")
    if outcome.error is not None:
        raise Exit(f"error: {outcome.error.line()} (partial result saved as {result.name})",
                   code=outcome.error.exit_code)
    if outcome.interrupted:
        raise Exit(f"interrupted: partial result saved as {result.name}", code=130)


@task(help={"a": "first saved result (the baseline): a name or a .json file",
            "b": "second saved result", "inventory": INVENTORY_HELP,
            "json": "print the comparison as JSON",
            "plot": "also draw it to FILE (.svg or .png): each measure's A and B side by "
                    "side, the tie band around A (needs the extra: pip install "
                    "'sparkrack[plot]')"})
@operator_task
def compare(c, a, b, inventory=None, json=False, plot=None):
    """Two saved bench runs side by side, measure by measure.

    Every measure, B - A and its percentage, and which run is ahead; a difference within 3 %
    of A is a tie (as the field report). --plot FILE draws them (SVG or PNG)."""
    from sparkrack.bench import compare as compare_runs
    from sparkrack.bench import store
    from sparkrack.bench.compare import header
    from sparkrack.bench.measure import TIE_PCT
    from sparkrack.fleet import Fleet

    if plot:
        from sparkrack.bench.plot import plot_format

        plot_format(plot)  # a wrong extension is refused before anything is read
    rack = inventory_from(inventory)
    with Fleet(rack) as fleet:
        run_a, where_a = store.load(rack, a, fleet)
        run_b, where_b = store.load(rack, b, fleet)
    names = (run_a.name, run_b.name) if run_a.name != run_b.name else ("A", "B")
    table = compare_runs(run_a, run_b, names=names)
    if plot:
        from sparkrack.bench.plot import plot as draw

        left_out = draw(table, names, plot, TIE_PCT)
        console.say(f"plot: {plot}" + (f" (in the table only: {', '.join(left_out)})"
                                       if left_out else ""))
    if json:
        console.print_json({"a": {"name": run_a.name, "from": where_a, **run_a.deployment,
                                  "date": run_a.date, "suite": run_a.suite, "partial": run_a.partial},
                            "b": {"name": run_b.name, "from": where_b, **run_b.deployment,
                                  "date": run_b.date, "suite": run_b.suite, "partial": run_b.partial},
                            "tie_pct": TIE_PCT,
                            "rows": [{"key": r.key, "label": r.label, "unit": r.unit, "a": r.a,
                                      "b": r.b, "delta": r.delta, "pct": r.pct,
                                      "verdict": r.verdict} for r in table]})
        return
    console.print_table(f"runs: A = {names[0]}, B = {names[1]}", ["run", names[0], names[1]],
                        header(run_a, run_b))
    console.print_table(f"bench.compare (tie: within {TIE_PCT:g}% of A)",
                        ["measure", names[0], names[1], "B - A", "verdict"],
                        [r.cells() for r in table])
