"""`invoke engines.learn`: an engine version's option table, read from its image on the
head (options.py) ([engines](../../docs/engines.md))."""
