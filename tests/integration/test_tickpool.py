"""The thread runner's schedulers taking turns on a few threads (control/tickpool.py), on both backends:
the calls a worker makes."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from sqlalchemy.orm import Session

from baton.control.runners import ThreadRunner
from baton.core.model import SchedulerSpec, SchedulerState
from baton.ingest.events import Delivery
from baton.ingest.scheduler import SchedulerContext
from baton.storage.engine import Store
from baton.storage.tables import Scheduler as SchedulerRow
from harness.factories import add_organisation, fast_settings
from harness.waiting import wait_until

ORGANISATIONS = [f"org{n}" for n in range(12)]


class TurnLog:
    """Event sources that count each scheduler's turns and notice two at once for one scheduler."""

    def __init__(self, failing: str | None = None) -> None:
        self.failing = failing
        self.received: Counter[str] = Counter()
        self.overlaps: list[str] = []
        self.threads: set[str] = set()
        self._in_turn: set[str] = set()
        self._lock = threading.Lock()

    def source(self, spec: SchedulerSpec) -> RecordingSource:
        if spec.id == self.failing:
            raise RuntimeError(f"no source for {spec.id}")
        return RecordingSource(self, spec.id)


class RecordingSource:
    def __init__(self, turns: TurnLog, scheduler_id: str) -> None:
        self.turns = turns
        self.scheduler_id = scheduler_id

    def receive(self, session: Session, limit: int) -> Sequence[Delivery]:
        turns = self.turns
        with turns._lock:
            if self.scheduler_id in turns._in_turn:
                turns.overlaps.append(self.scheduler_id)
            turns._in_turn.add(self.scheduler_id)
            turns.threads.add(threading.current_thread().name)
        try:
            session.connection()  # a real round trip's worth of holding a connection
            return []
        finally:
            with turns._lock:
                turns._in_turn.discard(self.scheduler_id)
                turns.received[self.scheduler_id] += 1

    def close(self) -> None:
        return None


@pytest.fixture
def organisations(store: Store) -> list[str]:
    for org in ORGANISATIONS:
        add_organisation(store, org)
    return ORGANISATIONS


@pytest.fixture
def runner_and_turns(
    store: Store, organisations: list[str], request: pytest.FixtureRequest
) -> Iterator[tuple[ThreadRunner, TurnLog]]:
    turns = TurnLog(failing=getattr(request, "param", None))
    context = SchedulerContext(
        store=store,
        settings=fast_settings(store.url, scheduler_threads=2),
        runner="worker",
        location="test",
        source_factory=turns.source,
    )
    context.leases().start_in_background()
    runner = ThreadRunner(context)
    try:
        yield runner, turns
    finally:
        runner.shutdown()
        context.leases().stop()


def claim_everything(runner: ThreadRunner) -> list[str]:
    claims = runner.context.leases().claim_unowned(1000, runner="worker")
    return runner.launch_claimed([(SchedulerSpec.parse(claim.scheduler_id), claim) for claim in claims])


def rows(store: Store) -> dict[str, SchedulerRow]:
    with store.session() as session:
        found = {row.id: row for row in session.query(SchedulerRow).all()}
        session.expunge_all()
    return found


def event_driven(ids: list[str]) -> list[str]:
    return [sid for sid in ids if not sid.startswith("report-")]


def test_many_schedulers_take_turns_on_two_threads_one_turn_at_a_time(
    store: Store, runner_and_turns: tuple[ThreadRunner, TurnLog]
) -> None:
    runner, turns = runner_and_turns
    started = claim_everything(runner)
    assert len(started) == 3 * len(ORGANISATIONS)
    assert claim_everything(runner) == []  # nothing left to claim, nothing filed twice
    assert wait_until(lambda: all(turns.received[sid] >= 5 for sid in event_driven(started)), 60)
    assert turns.overlaps == []
    assert turns.threads <= {"tickpool-0", "tickpool-1"}
    owner = runner.context.leases().owner
    assert wait_until(lambda: {row.state for row in rows(store).values()} == {SchedulerState.RUNNING.value}, 20)
    assert {row.owner for row in rows(store).values()} == {owner}
    assert sorted(spec.id for spec in runner.list()) == sorted(started)


def test_stopped_schedulers_give_their_rows_up_and_shutdown_gives_up_the_rest(
    store: Store, runner_and_turns: tuple[ThreadRunner, TurnLog]
) -> None:
    runner, turns = runner_and_turns
    started = claim_everything(runner)
    assert wait_until(lambda: all(turns.received[sid] >= 1 for sid in event_driven(started)), 60)
    leaving = [sid for sid in started if sid.endswith("-org0")]
    runner.stop_many(leaving, wait=True)
    after_stop = rows(store)
    assert all(after_stop[sid].owner is None and after_stop[sid].state == "stopped" for sid in leaving)
    assert sum(after_stop[sid].owner is not None for sid in started) == len(started) - len(leaving)
    counted = {sid: turns.received[sid] for sid in event_driven(leaving)}
    assert wait_until(lambda: all(turns.received[sid] >= 3 for sid in event_driven(started) if sid not in leaving), 60)
    assert {sid: turns.received[sid] for sid in event_driven(leaving)} == counted  # no turn after the stop
    runner.shutdown()
    assert {row.owner for row in rows(store).values()} == {None}
    assert {row.state for row in rows(store).values()} == {"stopped"}


@pytest.mark.parametrize("runner_and_turns", ["normalizer-org3"], indirect=True)
def test_a_failing_scheduler_ends_alone_and_is_dropped(
    store: Store, runner_and_turns: tuple[ThreadRunner, TurnLog]
) -> None:
    runner, turns = runner_and_turns
    started = claim_everything(runner)
    assert wait_until(lambda: runner.forget_dead() == ["normalizer-org3"], 30)
    failed = rows(store)["normalizer-org3"]
    assert failed.owner is None and failed.state == SchedulerState.FAILED.value
    others = [sid for sid in event_driven(started) if sid != "normalizer-org3"]
    assert wait_until(lambda: all(turns.received[sid] >= 3 for sid in others), 60)
    assert "normalizer-org3" not in {spec.id for spec in runner.list()}
