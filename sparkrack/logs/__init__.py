"""`invoke logs`: every rank's engine log read and merged by time (readers.py), and a
line's form, a failed start's reason among them (lines.py), what a known one means
(causes.py)
([internals](../../docs/internals.md#layout))."""
