"""The retention rule: which finished tasks are old enough to go, and how removal paces itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baton.core.model import TaskStatus
from baton.core.retention import FINISHED, pause_after, retention_cutoff
from baton.core.settings import Settings

NOW = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)


def test_finished_means_no_status_may_follow() -> None:
    assert set(FINISHED) == {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}


def test_the_cutoff_is_the_retention_before_now_and_zero_keeps_everything() -> None:
    assert retention_cutoff(NOW, 30) == NOW - timedelta(days=30)
    assert retention_cutoff(NOW, 1) == NOW - timedelta(days=1)
    assert retention_cutoff(NOW, 0) is None
    assert retention_cutoff(NOW, 0.25) == NOW - timedelta(hours=6)  # a fraction of a day too


def test_retention_defaults_to_keeping_every_task_and_refuses_a_negative_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().recovery.task_retention_days == 0  # as mula: rocky lists and counts every task
    monkeypatch.setenv("BATON_TASK_RETENTION_DAYS", "30")
    assert Settings().recovery.task_retention_days == 30
    monkeypatch.setenv("BATON_EVENT_RETENTION_DAYS", "0.007")
    assert Settings().recovery.event_retention_days == 0.007
    with pytest.raises(ValueError, match="task_retention_days"):
        Settings(task_retention_days=-1)


@given(st.floats(min_value=0.0, max_value=10.0), st.floats(min_value=0.05, max_value=1.0))
def test_removal_keeps_a_connection_busy_at_most_its_share(batch_seconds: float, share: float) -> None:
    pause = pause_after(batch_seconds, share)
    assert pause >= 0.0
    if batch_seconds > 0:
        assert batch_seconds / (batch_seconds + pause) == pytest.approx(share)
