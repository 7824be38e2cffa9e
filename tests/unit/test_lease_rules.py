"""Lease arithmetic (core/leases.py) without a database: renew deadlines, hung schedulers, expired
Kubernetes Leases, a worker's fair share, what it gives up and when its next round comes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from baton.core.leases import (
    LEASE_END_MARGIN_SECONDS,
    fair_share,
    lease_expired,
    making_progress,
    next_round_in,
    past_renew_deadline,
    spread_order,
    surplus,
)

SECONDS = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
IDS = st.lists(st.text(alphabet="abcdefghij-", min_size=1, max_size=12), unique=True, max_size=50)


def test_the_renew_deadline_is_passed_only_once_more_than_it_went_by() -> None:
    assert not past_renew_deadline(now=110.0, renewed_at=100.0, renew_deadline_seconds=10.0)  # exactly at it
    assert past_renew_deadline(now=110.5, renewed_at=100.0, renew_deadline_seconds=10.0)
    assert not past_renew_deadline(now=100.0, renewed_at=100.0, renew_deadline_seconds=0.0)


WHOLE_SECONDS = st.integers(min_value=0, max_value=10**6)


@settings(deadline=None)
@given(renewed_at=WHOLE_SECONDS, elapsed=WHOLE_SECONDS, deadline=WHOLE_SECONDS, later=WHOLE_SECONDS)
def test_a_holder_is_past_its_renew_deadline_from_the_first_moment_after_it_and_stays_so(
    renewed_at: int, elapsed: int, deadline: int, later: int
) -> None:
    now = float(renewed_at + elapsed)
    assert past_renew_deadline(now, renewed_at, deadline) is (elapsed > deadline)
    if past_renew_deadline(now, renewed_at, deadline):
        assert past_renew_deadline(now + later, renewed_at, deadline)  # only a renewal ends it
    assert not past_renew_deadline(now, now, deadline)  # just renewed


def test_a_scheduler_that_reported_within_the_hang_timeout_makes_progress() -> None:
    assert making_progress(now=129.9, progressed_at=100.0, hung_after_seconds=30.0)
    assert not making_progress(now=130.0, progressed_at=100.0, hung_after_seconds=30.0)  # exactly: hung
    assert not making_progress(now=500.0, progressed_at=100.0, hung_after_seconds=30.0)


def test_a_lease_is_free_once_its_duration_has_passed_since_its_renewal() -> None:
    renewed = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    duration = timedelta(seconds=15)
    assert lease_expired(None, duration, renewed)  # never renewed (released)
    assert not lease_expired(renewed, duration, renewed + duration)  # ends exactly now: still held
    assert lease_expired(renewed, duration, renewed + duration + timedelta(microseconds=1))
    assert not lease_expired(renewed, duration, renewed - timedelta(seconds=5))  # a clock behind the writer's


@settings(deadline=None)
@given(schedulers=st.integers(min_value=0, max_value=100_000), workers=st.integers(min_value=0, max_value=1_000))
def test_the_fair_share_covers_every_scheduler_with_the_fewest_per_worker(schedulers: int, workers: int) -> None:
    share = fair_share(schedulers, workers)
    counted = max(1, workers)  # the asking worker is live, whatever the count says
    assert share * counted >= schedulers  # together the workers take every scheduler
    assert (share - 1) * counted < schedulers or share == 0  # and one fewer each would leave some out


def test_fair_share_examples() -> None:
    assert fair_share(3000, 2) == 1500
    assert fair_share(3001, 2) == 1501
    assert fair_share(5, 0) == 5  # no live row yet (the first round): this worker takes all
    assert fair_share(0, 4) == 0


@settings(deadline=None)
@given(running=IDS, share=st.integers(min_value=0, max_value=60), data=st.data())
def test_a_worker_above_its_share_gives_up_the_same_schedulers_whatever_their_order(
    running: list[str], share: int, data: st.DataObject
) -> None:
    given_up = surplus(running, share)
    assert len(given_up) == max(0, len(running) - share)
    assert set(given_up) <= set(running)
    kept = set(running) - set(given_up)
    # the last ones in (organisation, type) order
    assert all(spread_order(k) < spread_order(g) for k in kept for g in given_up)
    shuffled = data.draw(st.permutations(running))
    assert surplus(shuffled, share) == given_up


def test_a_worker_keeps_whole_organisations_so_every_worker_runs_every_type_alike() -> None:
    """In id order the boefje schedulers (`boefje-*`, the busiest: catalogue polls, rescans, twins,
    backfills) came first, so the first worker kept every one of them and the others ran the idle
    report schedulers (the soak run: all 200 boefje schedulers in one of two workers)."""
    running = [f"{kind}-org{n}" for n in range(4) for kind in ("report", "normalizer", "boefje")]
    kept = set(running) - set(surplus(running, 6))
    assert kept == {f"{kind}-org{n}" for n in (0, 1) for kind in ("boefje", "normalizer", "report")}


def test_the_next_round_comes_early_only_for_a_peer_lease_ending_within_the_round() -> None:
    assert next_round_in(1.0, None) == 1.0  # no peer holds a lease
    assert next_round_in(1.0, 0.25) == 0.25 + LEASE_END_MARGIN_SECONDS
    assert next_round_in(1.0, 1.0) == 1.0  # not sooner than a round
    assert next_round_in(1.0, 7.5) == 1.0
    assert next_round_in(1.0, 0.0) == 1.0  # ended already: this round took what it could


@settings(deadline=None)
@given(round_seconds=st.floats(min_value=0.01, max_value=60), lease_end=st.none() | SECONDS)
def test_the_wait_before_the_next_round_is_never_longer_than_a_round_and_a_margin(
    round_seconds: float, lease_end: float | None
) -> None:
    wait = next_round_in(round_seconds, lease_end)
    assert 0 < wait <= round_seconds + LEASE_END_MARGIN_SECONDS
    if lease_end is not None and 0 < lease_end < round_seconds:
        assert wait > lease_end  # after the lease's end, never before it
