"""Small domain rules: settings by flat name, the heartbeat rule, backoff, the lifecycle, the range of moments."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from baton.core.backoff import RECONNECT, Backoff, fresh
from baton.core.errors import InvalidTransitionError
from baton.core.heartbeat import is_overdue, is_stale, live_state
from baton.core.lifecycle import check_transition, may_precede
from baton.core.model import SchedulerState, TaskStatus, utcnow
from baton.core.moments import EARLIEST, LATEST, MomentOutOfRangeError, in_range, within_range
from baton.core.settings import Settings


def test_group_settings_keep_their_flat_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_AMQP_URL", "amqp://u:p@broker:5672/%2F")
    monkeypatch.setenv("BATON_RETRY_PERIOD_SECONDS", "2")
    monkeypatch.setenv("BATON_TASK_MAX_ATTEMPTS", "7")
    settings = Settings(poll_interval_seconds=0.5)
    assert settings.amqp.url == "amqp://u:p@broker:5672/%2F"
    assert settings.leases.retry_period_seconds == 2  # from the environment
    assert settings.timing.poll_interval_seconds == 0.5  # given by its flat name
    assert settings.recovery.task_max_attempts == 7


def test_leases_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="RETRY_PERIOD"):
        Settings(lease_seconds=5, renew_deadline_seconds=10)


def test_the_heartbeat_rule() -> None:
    now = utcnow()
    fresh, old = now - timedelta(seconds=1), now - timedelta(seconds=60)
    assert not is_stale(SchedulerState.RUNNING, fresh, now, 30)
    assert is_stale(SchedulerState.RUNNING, old, now, 30)
    assert is_stale(SchedulerState.STARTING, None, now, 30)
    assert not is_stale(SchedulerState.STOPPED, old, now, 30)  # a stopped scheduler is not late
    assert live_state(SchedulerState.RUNNING, old, now, 30) is SchedulerState.FAILED


def test_a_beat_is_overdue_after_its_timeout_or_when_there_is_none() -> None:
    now = utcnow()
    assert not is_overdue(now - timedelta(seconds=30), now, 30)  # exactly the timeout: still on time
    assert is_overdue(now - timedelta(seconds=30, milliseconds=1), now, 30)
    assert is_overdue(None, now, 30)


def test_broker_reconnects_are_never_more_than_a_second_apart() -> None:
    """A consumer is back within a second of a restarted broker taking connections, however long the
    broker was away (the container run measures it: docs/replication-containers.md)."""
    backoff = fresh(RECONNECT)
    assert max(backoff.next() for _ in range(50)) <= 1.0


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(initial=1, maximum=5)
    assert [backoff.next() for _ in range(5)] == [1, 2, 4, 5, 5]
    backoff.reset()
    assert backoff.next() == 1


def test_lifecycle() -> None:
    assert may_precede(TaskStatus.RUNNING) == {TaskStatus.DISPATCHED}
    assert may_precede(TaskStatus.QUEUED) == {TaskStatus.DISPATCHED, TaskStatus.RUNNING}  # handed back
    check_transition(TaskStatus.DISPATCHED, TaskStatus.COMPLETED)
    with pytest.raises(InvalidTransitionError, match="'completed' to 'running'"):
        check_transition(TaskStatus.COMPLETED, TaskStatus.RUNNING)


# Every offset a time zone may have: strictly less than a day either way.
DAY = timedelta(days=1)
OFFSETS = st.timedeltas(min_value=timedelta(microseconds=1) - DAY, max_value=DAY - timedelta(microseconds=1))


@given(local=st.datetimes(), offset=OFFSETS, reader=OFFSETS)
@example(local=datetime(1, 1, 1), offset=timedelta(minutes=1), reader=timedelta(0))  # issue #44: year 0 in UTC
@example(local=datetime(9999, 12, 31, 23, 59), offset=timedelta(minutes=-1), reader=timedelta(0))
@example(local=datetime(9999, 12, 30, 23, 59), offset=timedelta(0), reader=timedelta(hours=14))
def test_a_moment_in_range_survives_every_conversion_and_others_are_refused(
    local: datetime, offset: timedelta, reader: timedelta
) -> None:
    moment = local.replace(tzinfo=timezone(offset))
    if within_range(moment):
        assert EARLIEST <= moment.astimezone(UTC) <= LATEST
        moment.astimezone(timezone(reader))  # read back in any session time zone: no OverflowError
        assert in_range(moment) is moment
        return
    with pytest.raises(MomentOutOfRangeError, match="0001-01-02 and 9999-12-30"):
        in_range(moment)
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        return  # the 500 of issue #44
    assert not EARLIEST <= utc <= LATEST


def test_a_date_is_its_midnight_and_a_naive_moment_is_utc() -> None:
    assert not within_range(date(1, 1, 1)) and within_range(date(1, 1, 2))
    assert within_range(date(9999, 12, 30)) and not within_range(date(9999, 12, 31))
    assert within_range(datetime(1, 1, 2)) and not within_range(datetime(1, 1, 1, 23, 59))
