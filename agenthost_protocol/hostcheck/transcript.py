"""One connection's traffic, both directions in order: what the host checks read.

A transcript is written and read as JSON Lines, one record a line::

    {"from": "client", "t": 1767225600000.0, "message": {"jsonrpc": "2.0", ...}}

``from`` says who sent it (``client`` or ``host``), ``t`` when (epoch ms,
informative only) and ``message`` the JSON-RPC message as parsed JSON.  A
transcript of several connections (what ``check-host`` writes) numbers them
with ``"conn"`` (absent: 0) and interleaves them in the order they were seen;
its ``{"step": ...}`` lines are the program that made the traffic, which
``check-host --replay`` runs and the checks skip.  A line that is not such a
record is refused with its line number: a capture is evidence, and a checker
that guessed would prove nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from enum import Enum
from typing import IO, Final

from attrs import field, frozen

from .._json import copy_json

__all__ = [
    "MAX_LINE_BYTES", "Direction", "Raw", "Record", "Transcript", "TranscriptError",
    "read_lines",
]

MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""64 MiB: the longest line a transcript may have.  A capture file is at most that
long (``serve --capture``), and a message is at most 16 MiB."""


class Direction(str, Enum):
    """Who sent a message."""

    CLIENT = "client"
    HOST = "host"


class TranscriptError(ValueError):
    """A transcript line that is not a record; ``line`` counts from 1."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def read_lines(stream: IO[bytes], *, limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of a UTF-8 ``stream``, without their line ends, each read on its own.

    No line is read whole past ``limit`` bytes: a longer one raises
    :class:`TranscriptError` with its number once ``limit + 1`` bytes of it are
    read, so a file of one line of gigabytes costs ``limit`` bytes of memory and
    the time to read them.  Text that is not UTF-8 raises ``UnicodeDecodeError``."""
    number = 0
    while line := stream.readline(limit + 1):
        number += 1
        if len(line) > limit and not (len(line) == limit + 1 and line.endswith(b"\n")):
            raise TranscriptError(number, f"longer than {limit} bytes (the most a line of a "
                                  "transcript may be): not read")
        yield line.decode("utf-8").rstrip("\r\n")


@frozen
class Raw:
    """A message kept as the bytes or text it arrived as, parsed each time it is read.

    Parsed JSON can cost some 25 times its size on the wire (``[{},{},...]``):
    a run keeps what the host sent this way, so its memory is what the host
    sent, and each check parses one message at a time.

    ``brief``, when given, is all the checks read of the message (a host's
    notification other than ``action``: its ``jsonrpc``, ``method`` and ``id``),
    so that they need not parse it at all; its lines
    (:meth:`Transcript.to_lines`) still hold it whole."""

    data: str | bytes
    brief: dict[str, object] | None = None
    owner: object = field(default=None, eq=False, repr=False)
    """Whatever must live as long as the message (what counts its bytes: while any
    message of a run is kept, its bytes stay counted)."""

    def __len__(self) -> int:
        return len(self.data)

    def parse(self) -> object:
        """The message as parsed JSON; what is not JSON is its text (a JSON string)."""
        try:
            return json.loads(self.data)
        except (ValueError, RecursionError):
            data = self.data
            return data if isinstance(data, str) else data.decode("utf-8", "replace")


def _keep(message: object) -> object:
    return message if isinstance(message, Raw) else copy_json(message)


def _parsed(message: object) -> object:
    return message.parse() if isinstance(message, Raw) else message


def _shown(message: object) -> str:
    return repr(_parsed(message))


def brief(message: object) -> dict[str, object] | None:
    """What the checks read of a host's ``message`` (parsed JSON), when that is less
    than all of it: for a notification other than ``action``, its ``jsonrpc``,
    ``method`` and ``id`` (``None``: they read it all)."""
    if not isinstance(message, dict) or type(message.get("method")) is not str \
            or message["method"] == "action":
        return None
    kept = {key: message[key] for key in ("jsonrpc", "method", "id") if key in message}
    if kept.get("id") is not None and type(kept["id"]) not in (str, int, float, bool):
        kept["id"] = ""  # what it is matters to no check, only that it is there
    if len(json.dumps(kept)) > 4096:
        return None  # a brief as long as the message saves nothing
    return kept


@frozen(kw_only=True)
class Record:
    """One message of a transcript."""

    sender: Direction
    _message: object = field(alias="message", converter=_keep, eq=_parsed, repr=_shown)
    time: float = 0.0
    """Epoch ms when it was sent or received (informative)."""
    conn: int = 0
    """Which connection it crossed, in a transcript of several."""

    @property
    def message(self) -> object:
        """The message as parsed JSON (a copy: a record never aliases the caller's data,
        and one given as :class:`Raw` is parsed again at each read; of one given with
        a :attr:`Raw.brief`, the brief).  :meth:`to_json` writes it whole."""
        message = self._message
        if isinstance(message, Raw):
            return dict(message.brief) if message.brief is not None else message.parse()
        return message

    @property
    def size(self) -> int:
        """The length of a :class:`Raw` message as it arrived (0: it was given parsed)."""
        return len(self._message) if isinstance(self._message, Raw) else 0

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {"from": self.sender.value, "t": self.time,
                                     "message": _parsed(self._message)}
        if self.conn:
            record["conn"] = self.conn
        return record


def _records(records: Iterable[Record]) -> tuple[Record, ...]:
    return tuple(records)


@frozen(kw_only=True)
class Transcript:
    """The messages of one connection, in the order they crossed it."""

    records: tuple[Record, ...] = field(converter=_records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def connections(self) -> dict[int, list[int]]:
        """Each connection's records, as indices into this transcript, in order."""
        found: dict[int, list[int]] = {}
        for index, record in enumerate(self.records):
            found.setdefault(record.conn, []).append(index)
        return found

    def only(self, indices: Iterable[int]) -> Transcript:
        """The transcript of these records alone (one connection's, say)."""
        return Transcript(records=[self.records[i] for i in indices])

    def to_lines(self) -> Iterator[str]:
        """The JSON Lines form, a line (without its newline) a record."""
        for record in self.records:
            yield json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> Transcript:
        """Read the JSON Lines form; raises :class:`TranscriptError` at the first bad line
        (blank lines are skipped)."""
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except (ValueError, RecursionError) as e:  # a capture is input like any other
                raise TranscriptError(number, f"not JSON: {e}") from None
            if isinstance(raw, dict) and len(raw) == 1 and ("step" in raw or "report" in raw):
                continue  # check-host's program and results: --replay reads the steps
            if not isinstance(raw, dict) or set(raw) - {"from", "t", "message", "conn"}:
                raise TranscriptError(number, 'a record is {"from", "t", "message"} (and '
                                      '"conn")')
            sender = raw.get("from")
            if sender not in ("client", "host"):
                raise TranscriptError(number, '"from" is "client" or "host"')
            when = raw.get("t", 0.0)
            if type(when) not in (int, float):
                raise TranscriptError(number, '"t" is a number (epoch ms)')
            if "message" not in raw:
                raise TranscriptError(number, '"message" is missing')
            conn = raw.get("conn", 0)
            if type(conn) is not int or conn < 0:
                raise TranscriptError(number, '"conn" is a connection number (0 or more)')
            message = raw["message"]
            try:
                record = Record(sender=Direction(sender), message=message,
                                time=float(when), conn=conn)
            except ValueError as e:  # NaN, Infinity: Python reads them, JSON has none
                try:
                    # a lone surrogate ("\ud800") is JSON, though no Python text model
                    # holds it: what a host sent is kept as it is, for the checks to judge
                    kept = Raw(json.dumps(message, allow_nan=False))
                    record = Record(sender=Direction(sender), message=kept,
                                    time=float(when), conn=conn)
                except ValueError:
                    raise TranscriptError(number, f"not JSON: {e}") from None
            records.append(record)
        return cls(records=records)
