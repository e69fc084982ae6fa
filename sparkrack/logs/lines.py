"""Log lines of the engine ranks: docker's timestamps, one line's form (rank and node
prefix, colour, escaped controls), the merge by time, the --follow reorder window, and the
line that says why a rank stopped (a failed start's summary).

Pure: `invoke logs` (logs/readers.py) reads the ranks and hands their lines here.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sparkrack.core.terminal import escape_controls

NS = 1_000_000_000
REORDER_WINDOW_S = 0.5  # --follow: a line waits this long for earlier lines of other ranks


# --- Times -------------------------------------------------------------------------------

def parse_timestamp(text: str) -> int | None:
    """Docker's RFC 3339 time with up to nine fraction digits -> unix nanoseconds (exact:
    a float would lose the order of lines written in the same microsecond), or None."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)",
                         text)
    if not match:
        return None
    whole, fraction, zone = match.groups()
    try:
        moment = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    seconds = int(moment.astimezone(UTC).timestamp())
    return seconds * NS + int((fraction or "0").ljust(9, "0"))


def format_timestamp(ns: int) -> str:
    """Unix nanoseconds as docker writes them: 2026-03-01T14:05:00.123456789Z."""
    seconds, fraction = divmod(ns, NS)
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"


# --- Lines -------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class LogLine:
    """One line of one rank's log; ordered by time, then rank."""

    ns: int
    rank: int
    node: str = field(compare=False)
    text: str = field(compare=False)


@dataclass(frozen=True)
class Notice:
    """Something to tell the operator about a rank's stream (stderr, not a log line)."""

    text: str


END = object()  # a reader's last item


def split_timestamp(line: str) -> tuple[int | None, str]:
    """`TIMESTAMP text` as docker writes it with timestamps=True -> (ns or None, text)."""
    stamp, _, text = line.partition(" ")
    ns = parse_timestamp(stamp)
    return (ns, text) if ns is not None else (None, line)


class LineSplitter:
    """Whole lines out of the chunks a docker stream yields (a frame may hold several lines
    or half of one; a TTY container's stream is cut anywhere)."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[str]:
        """The lines completed by chunk (without their newline)."""
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        return [line.rstrip(b"\r").decode(errors="replace") for line in lines]

    def flush(self) -> list[str]:
        """The last line if it had no newline."""
        rest, self._partial = self._partial, b""
        return [rest.rstrip(b"\r").decode(errors="replace")] if rest else []


class Dedup:
    """Drop what was already shown when a stream is attached again `since` the last line
    (docker's since is inclusive and lines of one instant can come twice)."""

    def __init__(self) -> None:
        self.last_ns: int | None = None
        self._at_last: set[str] = set()

    def since(self) -> float | None:
        """Where to attach again (unix seconds), or None if nothing was seen."""
        return None if self.last_ns is None else self.last_ns / NS

    def fresh(self, ns: int, text: str) -> bool:
        """Whether (ns, text) is new; remembers it if so."""
        if self.last_ns is not None and (ns < self.last_ns or (
                ns == self.last_ns and text in self._at_last)):
            return False
        if ns != self.last_ns:
            self.last_ns, self._at_last = ns, set()
        self._at_last.add(text)
        return True


def prefix(rank: int, node: str) -> str:
    """`[rank R NODE]`, as every line of a rank is shown."""
    return f"[rank {rank} {node}]"


def format_line(line: LogLine, *, timestamps: bool = False, color: str | None = None,
                raw: bool = False) -> str:
    """One merged line for the terminal: prefix, optionally docker's timestamp, the text
    with its control characters escaped (terminal.escape_controls) unless raw. color is an
    ANSI SGR code for the prefix (a terminal), or None."""
    head = prefix(line.rank, line.node)
    if color:
        head = f"\x1b[{color}m{head}\x1b[0m"
    stamp = f"{format_timestamp(line.ns)} " if timestamps else ""
    return f"{head} {stamp}{line.text if raw else escape_controls(line.text)}"


COLORS = ("36", "33", "32", "35", "34", "31", "96", "93")  # per rank, as compose colours services


def merge(sources: Iterable[Iterable[LogLine]]) -> Iterator[LogLine]:
    """Lines of several time-ordered sources in time order (ties: by rank)."""
    return heapq.merge(*sources)


class ReorderBuffer:
    """--follow: hold each line `window` seconds after it arrived, releasing the held lines
    in time order, so lines that ranks wrote at the same moment are shown in order even
    when they arrive a little apart."""

    def __init__(self, window: float = REORDER_WINDOW_S):
        self.window = window
        self._held: list[tuple[LogLine, int, float]] = []  # heap of (line, seq, arrived)
        self._seq = 0

    def push(self, line: LogLine, now: float) -> None:
        heapq.heappush(self._held, (line, self._seq, now))
        self._seq += 1

    def ready(self, now: float) -> list[LogLine]:
        """The lines whose time has come, in time order: once a held line has waited the
        window, it goes with every held line written before it (so no line waits more
        than the window, and lines arriving within it are put in order)."""
        out: list[LogLine] = []
        while True:
            expired = [line for line, _, arrived in self._held if arrived + self.window <= now]
            if not expired:
                return out
            cutoff = max(expired)
            while self._held and self._held[0][0] <= cutoff:
                out.append(heapq.heappop(self._held)[0])

    def drain(self) -> list[LogLine]:
        """Everything held, in time order (at the end)."""
        out = [heapq.heappop(self._held)[0] for _ in range(len(self._held))]
        return out


# --- Why a rank stopped ------------------------------------------------------------------

# an exception's name where a line quotes it: RuntimeError, torch.distributed.DistBackendError,
# ncclRemoteError (Python's last traceback line, or an engine's log line quoting it)
_EXCEPTION = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*|nccl\w*)(?:Error|Exception)\b")
_ERROR_WORD = re.compile(r"\b(?:ERROR|FATAL|CRITICAL|NCCL WARN|[Ee]rror|[Ff]ailed|[Ff]atal)\b")
# a C++ source location in brackets, as c10/Gloo enforce failures open with
_SOURCE = re.compile(r"\[(?:[^\]]* )?\S*/\S*:\d+\] ?")
_JSON_MESSAGE = ("message", "msg", "event")
_JSON_LEVEL = ("level", "levelname", "severity")
_JSON_EXCEPTION = ("exception", "exc_info", "error")
REASON_CHARS = 240
# NCCL puts the cause on the line after this one, under its exception line
_LAST_ERROR = "Last error:"


def _json_event(text: str) -> tuple[str, bool] | None:
    """A JSON log line as (its message, whether it reports an error); a start banner (the
    rank's argv and environment) as ("", False); None when the line is not a JSON object."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        event = json.loads(text)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    if event.get("event") == "start" or {"argv", "env", "cmdline"} & event.keys():
        return "", False
    message = next((str(event[k]) for k in _JSON_MESSAGE if event.get(k)), "")
    level = next((str(event[k]).upper() for k in _JSON_LEVEL if event.get(k)), "")
    raised = next((str(event[k]) for k in _JSON_EXCEPTION if event.get(k)), "")
    raised = (raised.strip().splitlines() or [""])[-1]  # a traceback: its last line
    if raised:
        message = f"{message}: {raised}" if message else raised
    return message, bool(raised) or level in ("ERROR", "CRITICAL", "FATAL")


def _unprefixed(text: str, prefix: str) -> str:
    """text without the engine's log prefix (level, time, rank) when it opens with one shaped
    as prefix, its digits aside."""
    digits = re.compile(r"\d")
    if prefix and digits.sub("0", text[:len(prefix)]) == digits.sub("0", prefix):
        return text[len(prefix):].strip()
    return text


_NCCL_INFO = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO ")


def nccl_info(text: str) -> bool:
    """Whether text is one of NCCL's INFO lines (NCCL_DEBUG=INFO, which nccl.env sets so
    that sparkrack reads what each rank uses): `invoke logs` leaves them out."""
    return bool(_NCCL_INFO.match(text))


def reason(lines: Iterable[str]) -> str | None:
    """The line of a stopped rank's last log lines that says why: its last exception line
    (as a traceback's last line is the cause), else its last error line, else its last
    line; never a start banner. NCCL's detail under "Last error:" replaces its exception's
    generic text. An exception line is shown from the exception's name on,
    without the C++ source location Gloo and c10 prefix (`invoke logs` has the whole
    line); one line of at most REASON_CHARS."""
    exception = error = last = None
    quoting = None  # the line before was NCCL's "Last error:": the log prefix it had
    for text in lines:
        event = _json_event(text)
        if event is not None:
            text, failed = event
        else:
            failed = bool(_ERROR_WORD.search(text))
        text = escape_controls(text).strip()
        if not text or nccl_info(text):
            continue
        last = text
        found = _EXCEPTION.search(text)
        if quoting is not None and exception is not None:
            exception = f"{exception.split(':', 1)[0]}: {_unprefixed(text, quoting)}"
        elif found:
            exception = text[found.start():]
        elif failed:
            error = text
        quoting = text[:-len(_LAST_ERROR)] if text.endswith(_LAST_ERROR) else None
    chosen = exception or error or last
    if chosen is None:
        return None
    chosen = _SOURCE.sub("", chosen)
    return chosen if len(chosen) <= REASON_CHARS else chosen[:REASON_CHARS - 1] + "…"
