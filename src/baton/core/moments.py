"""The moments a request may carry: the range every backend can hold, checked before any is bound.

A listing's or search's date (`min_created_at`, a filter on `created_at`, a schedule's `deadline_at`)
is converted to UTC when it is bound (`storage/tables.UTCDateTime`) and read back in the session's
time zone. Python's datetime, which both drivers use, spans the years 1 to 9999 (PostgreSQL holds
far more, SQLite stores text), and a moment near either end overflows in one of those conversions
(`0001-01-01T00:00:00+00:01` is in year 0 in UTC). So a moment is accepted only when its UTC value
lies a day inside Python's range, where no time zone's offset (always under a day) can carry it out.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
RANGE = f"between {EARLIEST.date().isoformat()} and {LATEST.date().isoformat()} (UTC)"  # strftime drops a year's zeros


class MomentOutOfRangeError(ValueError):
    """A moment outside [EARLIEST, LATEST] in UTC."""

    def __init__(self) -> None:
        super().__init__(f"out of range: a moment {RANGE}")


def within_range(value: date | datetime) -> bool:
    """Whether `value` (a date: its midnight; a time without a zone: UTC) lies in [EARLIEST, LATEST].

    Compared without converting `value` to UTC, which is what overflows: its local time against the
    bounds moved by its own offset (under a day, so the moved bounds are still datetimes)."""
    moment = value if isinstance(value, datetime) else datetime.combine(value, time.min)
    offset = moment.utcoffset() or timedelta(0)
    local = moment.replace(tzinfo=None)
    return EARLIEST.replace(tzinfo=None) + offset <= local <= LATEST.replace(tzinfo=None) + offset


def in_range(value: date | datetime) -> date | datetime:
    """`value` unchanged, or MomentOutOfRangeError (a ValueError, so a pydantic validator names the field)."""
    if not within_range(value):
        raise MomentOutOfRangeError
    return value
