"""Errors an operator sees: one line, names the place and the fix, maps to an exit code."""


class SparkrackError(Exception):
    """A failure explained to the operator in one line; never shown with a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None):
        self.message = message
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        """The one-line form: what is wrong, then how to fix it."""
        return f"{self.message} ({self.fix})" if self.fix else self.message


class UsageError(SparkrackError):
    """Bad input from the operator: a flag, a file, an inventory value. Exit code 2."""

    exit_code = 2


class InventoryError(UsageError):
    """An inventory file is wrong; the message names file:line and the fix."""

    def __init__(self, path, line: int | None, message: str, *, fix: str | None = None):
        self.path = str(path)
        self.lineno = line
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {message}", fix=fix)


class UnsafeAddressError(UsageError):
    """The fleet layer refused to contact an address (network safety rule)."""


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest of choices, or '' (for an error's message)."""
    import difflib

    close = difflib.get_close_matches(word, [str(choice) for choice in choices], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


LISTED_UP_TO = 60  # characters: a longer list of what is allowed goes to the docs


def allowed_fix(label: str, allowed, docs: str) -> str:
    """The fix of an error naming something unknown: `label: a, b, c` when they are few,
    else where the docs list them (an error stays one short line, not a list of 40 keys)."""
    names = [str(name) for name in allowed]
    listed = ", ".join(names)
    if len(listed) <= LISTED_UP_TO:
        return f"{label}: {listed}"
    return f"{label}: {len(names)} of them, see {docs}"
