"""One operator at a time, and a record of every change (issue 11).

- identity.py  who runs this (user@host), where the local state lives, the inventory digest
- remote.py    the node-side lock script (a constant, values as positional arguments) and
               the parser of its replies
- lock.py      RackLock: a local file lock (filelock) then the lock file on the head node,
               kept alive by a heartbeat thread; stale after STALE_AFTER s without one
- audit.py     the audit records (JSON lines, start then end), masking, `note()` for what
               changed, the hash chain and its check, reading and pairing them back
- guard.py     the lock and the audit record of one changing task, together

A task that changes the rack runs inside `Guard` (the CLI's `rack_task` does it): the lock
is taken and the start record appended in one round trip to the head, the end record
appended and the lock released in another.
"""
