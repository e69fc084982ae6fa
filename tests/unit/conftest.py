"""Fixtures shared by the unit tests: `sshd`, a real throwaway sshd on loopback addresses
(tests/unit/loopback.py)."""

from loopback import sshd  # noqa: F401
