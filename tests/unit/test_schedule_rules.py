"""The schedule rules, without a database: cron expressions and when a schedule is first due, what a
new schedule must be (checked in a fixed order, so the first problem is the one named), time ranges
of a listing, and which columns the schedule filter may name."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baton.core.cron import check_cron, first_deadline, is_valid_cron, next_cron_run, next_deadline
from baton.core.errors import ContradictoryInputError, FilterError
from baton.core.filters import SCHEDULE_COLUMNS, Condition, parse_filters
from baton.core.jobs import ReportJob, job_hash
from baton.service.schedules import ScheduleQuery, check_ranges, new_schedule

WEDNESDAY = datetime(2026, 1, 7, 12, 30, tzinfo=UTC)
MONDAY_SIX = datetime(2026, 1, 12, 6, 0, tzinfo=UTC)
REPORT_DATA = {"organisation_id": "acme", "report_recipe_id": "weekly"}
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@pytest.mark.parametrize("expression", ["* * * * *", "0 6 * * 1", "*/5 0-6 1,15 * *"])
def test_valid_cron_expressions_pass(expression: str) -> None:
    assert is_valid_cron(expression)
    check_cron(expression)


@pytest.mark.parametrize("expression", ["", "* * * *", "61 * * * *", "every monday"])
def test_invalid_cron_expressions_are_refused_naming_the_expression(expression: str) -> None:
    assert not is_valid_cron(expression)
    with pytest.raises(ContradictoryInputError, match=f"^Invalid cron expression: {re.escape(expression)}$"):
        check_cron(expression)


def test_no_cron_expression_is_no_error() -> None:
    check_cron(None)


def test_next_cron_run_is_the_next_matching_minute() -> None:
    assert next_cron_run("0 6 * * 1", WEDNESDAY) == MONDAY_SIX
    assert next_cron_run("0 6 * * 1", MONDAY_SIX) == MONDAY_SIX + timedelta(days=7)  # strictly after


@given(after=moments)
def test_every_five_minutes_runs_within_five_minutes_on_a_multiple_of_five(after: datetime) -> None:
    upcoming = next_cron_run("*/5 * * * *", after)
    assert after < upcoming <= after + timedelta(minutes=5)
    assert upcoming.minute % 5 == 0 and upcoming.second == 0 and upcoming.microsecond == 0


@given(after=moments)
def test_a_one_off_schedule_has_no_next_deadline(after: datetime) -> None:
    assert next_deadline(None, after) is None
    assert next_deadline("0 6 * * 1", after) == next_cron_run("0 6 * * 1", after)


def test_first_deadline_is_the_given_one_else_the_next_cron_run() -> None:
    given_deadline = WEDNESDAY + timedelta(hours=1)
    assert first_deadline("0 6 * * 1", given_deadline, WEDNESDAY) == given_deadline
    assert first_deadline("0 6 * * 1", None, WEDNESDAY) == MONDAY_SIX
    assert first_deadline(None, given_deadline, WEDNESDAY) == given_deadline
    assert first_deadline(None, None, WEDNESDAY) is None


def test_a_new_schedule_takes_the_jobs_hash_and_keeps_data_as_given() -> None:
    data = {**REPORT_DATA, "extra": [1, 2]}
    new = new_schedule("report", "acme", data, "0 6 * * 1", None, now=WEDNESDAY)
    assert new.scheduler_id == "report" and new.organisation == "acme"
    assert new.data == data
    assert new.hash == job_hash(ReportJob.model_validate(data))
    assert new.deadline_at == MONDAY_SIX


def test_a_one_off_schedule_is_due_at_its_deadline() -> None:
    new = new_schedule("report", "acme", REPORT_DATA, None, WEDNESDAY, now=MONDAY_SIX)
    assert new.deadline_at == WEDNESDAY and new.schedule is None


NEW_SCHEDULE_PROBLEMS: list[tuple[dict[str, Any], str]] = [
    # Each case also has every problem named further down the list: the first one is named.
    ({"scheduler_id": "nope", "data": {}, "schedule": None, "deadline_at": None}, "Either deadline_at or schedule"),
    ({"scheduler_id": "nope", "data": {}, "schedule": "bad", "deadline_at": None}, "Invalid cron expression: bad"),
    ({"scheduler_id": "nope", "data": {}, "schedule": "* * * * *", "deadline_at": None}, "Scheduler nope not found"),
    ({"scheduler_id": "report", "data": {}, "schedule": None, "deadline_at": WEDNESDAY}, "not a report job"),
]


@pytest.mark.parametrize(("fields", "named"), NEW_SCHEDULE_PROBLEMS)
def test_a_bad_new_schedule_is_refused_naming_its_first_problem(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ContradictoryInputError, match=re.escape(named)):
        new_schedule(organisation="acme", now=WEDNESDAY, **fields)


def test_malformed_job_data_names_the_missing_fields() -> None:
    with pytest.raises(ContradictoryInputError) as refused:
        new_schedule("report", "acme", {"organisation_id": "acme"}, "* * * * *", None, now=WEDNESDAY)
    assert "data.report_recipe_id" in str(refused.value)


def test_listing_ranges_must_not_be_upside_down() -> None:
    check_ranges(ScheduleQuery(min_deadline_at=WEDNESDAY, max_deadline_at=WEDNESDAY))  # inclusive: one moment
    check_ranges(ScheduleQuery(min_created_at=WEDNESDAY))  # open-ended
    with pytest.raises(ContradictoryInputError, match=r"^min_created_at must be less than max_created_at$"):
        check_ranges(ScheduleQuery(min_created_at=MONDAY_SIX, max_created_at=WEDNESDAY))
    both_upside_down = ScheduleQuery(
        min_deadline_at=MONDAY_SIX, max_deadline_at=WEDNESDAY, min_created_at=MONDAY_SIX, max_created_at=WEDNESDAY
    )
    with pytest.raises(ContradictoryInputError, match=r"^min_deadline_at"):
        check_ranges(both_upside_down)


def test_the_schedule_filter_names_schedule_columns_only() -> None:
    tree = parse_filters({"column": "enabled", "value": True}, columns=SCHEDULE_COLUMNS)
    assert tree == Condition("enabled", (), "eq", True)
    deadline = parse_filters(
        {"column": "deadline_at", "operator": "<", "value": "2026-01-07"}, columns=SCHEDULE_COLUMNS
    )
    assert isinstance(deadline, Condition) and deadline.operator == "lt"
    with pytest.raises(FilterError, match="unknown column"):
        parse_filters({"column": "status", "value": "queued"}, columns=SCHEDULE_COLUMNS)
    with pytest.raises(FilterError, match="unknown column"):
        parse_filters({"column": "enabled", "value": True})  # not a task column
