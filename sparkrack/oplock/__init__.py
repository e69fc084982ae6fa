"""One operator at a time, and a record of every change: the rack lock and the audit log
(docs/operators.md). A task that changes the rack runs inside `Guard` (guard.py; the CLI's
`rack_task` does it).
"""
