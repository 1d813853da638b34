"""The injectable clock of the reducers and the chat timestamp form of AHP.

Only the chat reducer reads the clock (AHP 0.7.0): it stamps ``modifiedAt``
with ``new Date(Date.now()).toISOString()``.  :func:`iso_timestamp` renders
epoch milliseconds exactly as JavaScript does, for every value a JavaScript
``Date`` accepts (``|ms| <= 8.64e15``, about ±273,790 years around 1970)::

    0                   -> 1970-01-01T00:00:00.000Z
    253402300800000     -> +010000-01-01T00:00:00.000Z   (years past 9999: sign, 6 digits)
    -62198755200000     -> -000001-01-01T00:00:00.000Z   (years before 0: sign, 6 digits)

**Out-of-range policy.**  JavaScript throws a ``RangeError`` for anything else
(``toISOString`` of an invalid date); a reducer must never raise, so here
such values are *clamped* to the nearest end of the JavaScript range:
``ms > 8.64e15`` (and ``+inf``) renders as ``+275760-09-13T00:00:00.000Z``,
``ms < -8.64e15`` (and ``-inf``) as ``-271821-04-20T00:00:00.000Z``, and NaN
as the epoch, ``1970-01-01T00:00:00.000Z``.  A fractional value is truncated
toward zero first, as JavaScript's ``TimeClip`` does.  A clock returning
out-of-range values is broken, but the states it produces stay well-formed.
"""

from __future__ import annotations

import datetime
import functools
import math
import time
from collections.abc import Callable
from typing import Final

__all__ = ["MAX_TIME_MS", "Clock", "clamp_ms", "iso_timestamp", "now_ms"]

Clock = Callable[[], int]
"""A zero-argument callable returning the time as integer epoch milliseconds."""

MAX_TIME_MS: Final = 8_640_000_000_000_000
"""The largest ``|ms|`` a JavaScript ``Date`` can hold (100,000,000 days)."""

_MS_PER_DAY: Final = 86_400_000


def now_ms(now: Clock | None) -> int:
    """Read ``now``, or the wall clock when it is ``None``."""
    if now is None:
        return time.time_ns() // 1_000_000
    return now()


def clamp_ms(ms: float) -> int:
    """``ms`` as an integer inside the JavaScript ``Date`` range (the policy above)."""
    if type(ms) is not int:
        if math.isnan(ms):
            return 0
        if math.isinf(ms):
            return MAX_TIME_MS if ms > 0 else -MAX_TIME_MS
        ms = int(ms)  # truncates toward zero, like TimeClip
    if ms > MAX_TIME_MS:
        return MAX_TIME_MS
    if ms < -MAX_TIME_MS:
        return -MAX_TIME_MS
    return ms


def iso_timestamp(ms: float) -> str:
    """``new Date(ms).toISOString()``: e.g. ``1970-01-01T00:00:09.999Z``.

    Always three fractional digits and a ``Z``; a year outside 0..9999 is
    written with a sign and six digits.  Values outside the JavaScript range
    are clamped (see the module docstring); never raises for a real number.
    """
    days, ms_of_day = divmod(clamp_ms(ms), _MS_PER_DAY)
    seconds, millis = divmod(ms_of_day, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    # Tables rather than format specifications: ``f"{n:02d}"`` costs several
    # times as much, and a turn's start and end each render a timestamp.
    return (
        f"{_day_text(days)}T{_TWO_DIGITS[hour]}:{_TWO_DIGITS[minute]}:"
        f"{_TWO_DIGITS[second]}.{_THREE_DIGITS[millis]}Z"
    )


# A clock stays on one day for a day: the calendar is worked out once a day
# (about half the cost of a timestamp), in a small cache of this pure function.
@functools.lru_cache(maxsize=8)
def _day_text(days: int) -> str:
    """The date part of ``toISOString``, ``days`` after 1970-01-01: ``2025-06-15``."""
    if _FIRST_DAY <= days <= _LAST_DAY:  # years 1 to 9999: the C calendar of ``datetime``
        date = _date_from_ordinal(days + _ORDINAL_1970)
        year, month, day = date.year, date.month, date.day
    else:
        year, month, day = _civil_from_days(days)
    # Four digits for years 0 to 9999; a sign and six digits beyond (ES2015 "expanded years").
    if 0 <= year <= 9999:
        year_text = "%04d" % year  # noqa: UP031
    else:
        year_text = ("+" if year > 0 else "-") + "%06d" % abs(year)  # noqa: UP031
    return f"{year_text}-{_TWO_DIGITS[month]}-{_TWO_DIGITS[day]}"


_date_from_ordinal = datetime.date.fromordinal
_ORDINAL_1970: Final = datetime.date(1970, 1, 1).toordinal()
_FIRST_DAY: Final = datetime.date.min.toordinal() - _ORDINAL_1970
_LAST_DAY: Final = datetime.date.max.toordinal() - _ORDINAL_1970
_TWO_DIGITS: Final = tuple(f"{n:02d}" for n in range(100))
_THREE_DIGITS: Final = tuple(f"{n:03d}" for n in range(1000))


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian calendar, ``days`` after 1970-01-01.

    Howard Hinnant's ``civil_from_days``: counts in 400-year eras (146,097
    days each) from 0000-03-01, so that leap days fall at the end of a year.
    Works for any integer, unlike :mod:`datetime` (years 1 to 9999 only).
    """
    days += 719_468  # from 1970-01-01 to 0000-03-01
    era, day_of_era = divmod(days, 146_097)
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # 0 = March
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day
