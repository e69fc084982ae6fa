"""Fixtures shared by the unit tests: `sshd`, a real throwaway sshd on loopback addresses
(tests/unit/loopback.py)."""

import sys
from pathlib import Path

from loopback import sshd  # noqa: F401

# tests/unit/<package>/: a test module imports a helper of another folder's
# by its name (`from test_capagent import BOOT_ID`), as it did when they sat side by side
sys.path[:0] = [str(folder) for folder in sorted(Path(__file__).parent.iterdir())
                if folder.is_dir() and any(folder.glob("test_*.py"))]
