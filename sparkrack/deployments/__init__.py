"""A deployment as the rack holds it: its records on the head, the engine containers
that run it (its ranks), what runs now, and the one HTTP client of the engines'
endpoints. Below lifecycle, so onboarding, bench, status and the watchdog use it
without it ([internals](../../docs/internals.md#layout))."""
