"""The recovery rule (core/recovery.py): which silent task is handed out again, which fails, and why."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baton.core.model import TaskStatus
from baton.core.recovery import (
    REPLACED_PREFIX,
    Action,
    RecoveryRule,
    reissued_data,
    replaced_reason,
    replaced_status,
)
from baton.core.settings import Settings

NOW = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)
DEFAULT = RecoveryRule.from_settings(Settings())


def test_the_defaults_leave_running_tasks_to_the_grace_period(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = RecoveryRule(timeout_seconds=1800, max_attempts=3, running_limit_seconds=86_400, requeue_running=False)
    assert expected == DEFAULT
    monkeypatch.setenv("BATON_GRACE_PERIOD_SECONDS", "3600")
    assert RecoveryRule.from_settings(Settings()).running_limit_seconds == 3600
    monkeypatch.setenv("BATON_RUNNING_TASK_LIMIT_SECONDS", "7200")
    monkeypatch.setenv("BATON_REQUEUE_RUNNING_TASKS", "true")
    rule = RecoveryRule.from_settings(Settings())
    assert (rule.running_limit_seconds, rule.requeue_running) == (7200, True)
    monkeypatch.setenv("BATON_RUNNING_TASK_LIMIT_SECONDS", "0")
    assert RecoveryRule.from_settings(Settings()).running_limit_seconds is None
    with pytest.raises(ValueError, match="running_task_limit_seconds"):
        Settings(running_task_limit_seconds=-1)


def test_a_silent_running_task_is_left_alone_until_its_limit() -> None:
    for silent in (0, 1800, 7200, 86_399):
        assert DEFAULT.verdict(TaskStatus.RUNNING, silent, 0) is None
    verdict = DEFAULT.verdict(TaskStatus.RUNNING, 86_400, 0)
    assert verdict is not None and verdict.action is Action.FAIL and verdict.attempts == 1
    assert "BATON_RUNNING_TASK_LIMIT_SECONDS" in verdict.reason


def test_a_dispatched_task_not_started_within_the_timeout_is_handed_out_again_then_failed() -> None:
    assert DEFAULT.verdict(TaskStatus.DISPATCHED, 1799, 0) is None
    first = DEFAULT.verdict(TaskStatus.DISPATCHED, 1800, 0)
    assert first is not None and (first.action, first.attempts) == (Action.REISSUE, 1)
    assert "not started within 1800 s" in first.reason
    second = DEFAULT.verdict(TaskStatus.DISPATCHED, 1800, 1)
    assert second is not None and (second.action, second.attempts) == (Action.REISSUE, 2)
    last = DEFAULT.verdict(TaskStatus.DISPATCHED, 1800, 2)
    assert last is not None and (last.action, last.attempts) == (Action.FAIL, 3)
    assert last.reason == "no progress reported after 3 attempts (status timeout)"


def test_the_rule_before_hands_out_a_silent_running_task_again() -> None:
    rule = RecoveryRule(timeout_seconds=1800, max_attempts=3, running_limit_seconds=None, requeue_running=True)
    verdict = rule.verdict(TaskStatus.RUNNING, 1800, 0)
    assert verdict is not None and verdict.action is Action.REISSUE and "while running" in verdict.reason
    assert rule.cutoffs(NOW) == {
        TaskStatus.DISPATCHED: NOW - timedelta(seconds=1800),
        TaskStatus.RUNNING: NOW - timedelta(seconds=1800),
    }


def test_storage_reads_only_what_the_rule_may_concern() -> None:
    assert DEFAULT.cutoffs(NOW) == {
        TaskStatus.DISPATCHED: NOW - timedelta(seconds=1800),
        TaskStatus.RUNNING: NOW - timedelta(days=1),
    }
    never = RecoveryRule(timeout_seconds=60, max_attempts=3, running_limit_seconds=None, requeue_running=False)
    assert never.cutoffs(NOW) == {TaskStatus.DISPATCHED: NOW - timedelta(seconds=60)}


@given(
    status=st.sampled_from(list(TaskStatus)),
    silent=st.floats(min_value=0, max_value=10 * 86_400),
    attempts=st.integers(min_value=0, max_value=10),
    timeout=st.floats(min_value=1, max_value=86_400),
    limit=st.one_of(st.none(), st.floats(min_value=1, max_value=10 * 86_400)),
    requeue_running=st.booleans(),
)
def test_the_cutoffs_never_hide_a_task_the_rule_would_act_on(
    status: TaskStatus, silent: float, attempts: int, timeout: float, limit: float | None, requeue_running: bool
) -> None:
    rule = RecoveryRule(timeout, 3, limit, requeue_running)
    verdict = rule.verdict(status, silent, attempts)
    cutoff = rule.cutoffs(NOW).get(status)
    if verdict is not None:
        assert cutoff is not None and NOW - timedelta(seconds=silent) <= cutoff
        assert verdict.attempts == attempts + 1
    if status not in (TaskStatus.DISPATCHED, TaskStatus.RUNNING):
        assert verdict is None and cutoff is None
    if status is TaskStatus.RUNNING and not requeue_running and verdict is not None:
        assert verdict.action is Action.FAIL  # a running task is only ever given up, never run again


def test_the_replaced_task_names_its_replacement_and_takes_no_report_any_more() -> None:
    new_id = uuid.uuid4()
    assert replaced_reason(new_id, "why").startswith(f"{REPLACED_PREFIX}{new_id}: ")
    assert replaced_status(TaskStatus.DISPATCHED) is TaskStatus.CANCELLED
    assert replaced_status(TaskStatus.RUNNING) is TaskStatus.FAILED


def test_an_openkat_job_gets_its_new_task_id_and_other_data_stays() -> None:
    old, new = uuid.uuid4(), uuid.uuid4()
    job = {"id": str(old), "boefje": {"id": "dns-records"}, "input_ooi": "Hostname|internet|a"}
    assert reissued_data(job, old, new) == {**job, "id": str(new)}
    assert job["id"] == str(old)  # not changed in place
    assert reissued_data({"n": 1}, old, new) == {"n": 1}
    assert reissued_data({"id": "someone else's"}, old, new) == {"id": "someone else's"}
