"""Fixtures shared by the unit tests: `sshd`, a real throwaway sshd on loopback addresses
(loopback_sshd)."""

from loopback_sshd import sshd  # noqa: F401
