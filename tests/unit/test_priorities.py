"""The boefje planner's ranking (core/priorities.py): never-run pairs first, then the longer since
their last run, the sooner; never priority 1, which is a person's (rocky's manual runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from baton.core.priorities import AUTOMATIC_PRIORITY, MANUAL_PRIORITY, rank_boefje_task

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
AGES = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650))


def test_never_run_first_then_the_oldest_run() -> None:
    assert rank_boefje_task(None, NOW) == 2
    assert rank_boefje_task(NOW, NOW) == 170  # ran just now: last
    assert rank_boefje_task(NOW - timedelta(minutes=59), NOW) == 170
    assert rank_boefje_task(NOW - timedelta(hours=1), NOW) == 169
    assert rank_boefje_task(NOW - timedelta(hours=167), NOW) == 3
    assert rank_boefje_task(NOW - timedelta(days=30), NOW) == 3  # a week or more: all alike


@settings(deadline=None)
@given(age=AGES)
def test_a_pair_that_ran_ranks_between_three_and_170_never_with_the_never_run(age: timedelta) -> None:
    assert 3 <= rank_boefje_task(NOW - age, NOW) <= 170


@settings(deadline=None)
@given(age=st.none() | AGES)
def test_an_automatic_task_never_takes_the_manual_priority(age: timedelta | None) -> None:
    previous = None if age is None else NOW - age
    assert rank_boefje_task(previous, NOW) >= AUTOMATIC_PRIORITY > MANUAL_PRIORITY


@settings(deadline=None)
@given(age=AGES, more=AGES)
def test_the_longer_since_the_last_run_the_sooner(age: timedelta, more: timedelta) -> None:
    assert rank_boefje_task(NOW - age - more, NOW) <= rank_boefje_task(NOW - age, NOW)


@settings(deadline=None)
@given(age=AGES)
def test_the_rank_depends_only_on_whole_hours_since_the_run(age: timedelta) -> None:
    hours = int(age.total_seconds() // 3600)
    assert rank_boefje_task(NOW - age, NOW) == rank_boefje_task(NOW - timedelta(hours=hours), NOW)
