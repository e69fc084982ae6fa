"""The plumbing every part uses: errors, events, atomic writes, signals, the terminal
and the console, the one --since grammar ([internals](../../docs/internals.md#layout))."""
