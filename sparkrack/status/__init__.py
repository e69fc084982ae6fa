"""`invoke status`: one row per node from one facts round trip (rows.py), and the
table's shapes (view.py) ([internals](../../docs/internals.md#layout))."""
