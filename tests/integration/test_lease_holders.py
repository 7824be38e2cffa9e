"""One lease-holder row per process keeps its scheduler rows leased (storage/control/scheduler_leases.py,
ingest/ownership.py): a renewal writes that row, not the schedulers', and what the process owns but
no longer holds is given up."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from baton.core.settings import LeaseSettings
from baton.ingest.ownership import ABANDONED_AFTER_LEASES, Ownership
from baton.storage.control import scheduler_leases
from baton.storage.engine import Store
from baton.storage.tables import Scheduler as SchedulerRow
from harness.factories import add_organisation

LEASES = LeaseSettings(lease_seconds=6, renew_deadline_seconds=4, retry_period_seconds=1)
IDS = ["boefje-acme", "normalizer-acme", "report-acme"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1e9  # far from the machine's own monotonic clock: any reading of that one shows

    def __call__(self) -> float:
        return self.now


class Lessee:
    def __init__(self) -> None:
        self.lost: list[str] = []
        self.enabled: list[bool] = []

    def lease_lost(self, reason: str) -> None:
        self.lost.append(reason)

    def set_enabled(self, enabled: bool) -> None:
        self.enabled.append(enabled)


def holding(store: Store, clock: FakeClock | None = None) -> tuple[Ownership, dict[str, Lessee]]:
    add_organisation(store, "acme")
    ownership = Ownership(store, LEASES, owner="host:1#aa", hung_after_seconds=30, clock=clock or FakeClock())
    lessees = {}
    for scheduler_id, claim in ownership.claim(IDS).items():
        lessees[scheduler_id] = Lessee()
        ownership.hold(claim, lessees[scheduler_id])
    return ownership, lessees


def written(store: Store) -> dict[str, tuple[datetime | None, datetime | None, str | None, str]]:
    """What the scheduler rows themselves hold (not what their holder adds)."""
    with store.session() as session:
        rows = session.execute(
            text("SELECT id, heartbeat_at, lease_expires_at, owner, state FROM schedulers ORDER BY id")
        ).all()
    return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}


def rows(store: Store) -> dict[str, SchedulerRow]:
    with store.session() as session:
        found = {row.id: row for row in session.query(SchedulerRow).all()}
        session.expunge_all()
    return found


def test_renewals_write_the_holder_row_and_leave_the_scheduler_rows_alone(store: Store) -> None:
    ownership, lessees = holding(store)
    ownership.renew()
    before = written(store)
    first = rows(store)
    ownership.renew()
    ownership.renew()
    assert written(store) == before  # not one scheduler row written by three renewals
    after = rows(store)
    for row in after.values():  # what they read: their holder's renewal, later than what they hold
        assert row.heartbeat_at is not None and row.written_heartbeat_at is not None
        assert row.heartbeat_at > row.written_heartbeat_at and row.heartbeat_at >= first[row.id].heartbeat_at  # type: ignore[operator]
        assert row.lease_expires_at is not None and row.written_lease_expires_at is not None
        assert row.lease_expires_at > row.written_lease_expires_at
    with store.session() as session:  # a claimant sees the rows leased: nothing to take
        assert scheduler_leases.claim_unowned(session, "other:2#bb", 10, 6) == []
    assert all(lessee.lost == [] for lessee in lessees.values())


def test_rows_leased_only_by_a_holder_whose_lease_ended_can_be_claimed(store: Store) -> None:
    ownership, _lessees = holding(store)
    ownership.renew()
    with store.session() as session:
        session.execute(text("UPDATE lease_holders SET expires_at = :past"), {"past": "2000-01-01 00:00:00"})
        session.execute(text("UPDATE schedulers SET lease_expires_at = :past"), {"past": "2000-01-01 00:00:00"})
    with store.session() as session:
        taken = scheduler_leases.claim_unowned(session, "other:2#bb", 10, 6)
    assert sorted(claim.scheduler_id for claim in taken) == IDS


def test_a_process_that_gave_everything_up_releases_its_rows_at_the_next_renewal(store: Store) -> None:
    ownership, lessees = holding(store)
    ownership.renew()
    ownership.give_up_everything("renew deadline passed")
    assert all(lessee.lost == ["renew deadline passed"] for lessee in lessees.values())
    ownership.renew()  # the database answers again: the rows it still owns are freed, not kept leased
    assert {owner for _hb, _lease, owner, _state in written(store).values()} == {None}


def test_a_hung_scheduler_loses_its_row_and_a_waiting_one_does_not(store: Store) -> None:
    clock = FakeClock()
    ownership, lessees = holding(store, clock)
    ownership.report("boefje-acme", "running")  # a turn began ...
    ownership.expect("normalizer-acme", 3600)  # ... this one waits for its next turn, an hour away
    ownership.expect("report-acme", 3600)
    clock.now += 31
    ownership.renew()
    assert lessees["boefje-acme"].lost and "hung" in lessees["boefje-acme"].lost[0]
    assert lessees["normalizer-acme"].lost == [] and lessees["report-acme"].lost == []
    state = written(store)
    assert state["boefje-acme"][2:] == (None, "failed")
    assert state["normalizer-acme"][2] == ownership.owner and state["report-acme"][2] == ownership.owner


def test_a_scheduler_waiting_for_a_thread_is_not_hung_while_other_turns_end(store: Store) -> None:
    """After a burst of events thousands of schedulers are due at once and wait for a few threads: one
    overdue between turns is waiting, not hung, while turns of the process keep ending; when none ends
    (every thread stuck) it is given up like a hung one, so another process runs it."""
    clock = FakeClock()
    ownership, lessees = holding(store, clock)
    for scheduler_id in IDS:
        ownership.expect(scheduler_id, 0)  # due again at once: each waits for a thread
    for _ in range(4):  # 40 s during which only boefje-acme gets turns
        clock.now += 10
        ownership.report("boefje-acme", "running")
        ownership.expect("boefje-acme", 0)
        ownership.renew()
    assert all(lessee.lost == [] for lessee in lessees.values())
    clock.now += 31  # no turn ends any more
    ownership.renew()
    assert lessees["normalizer-acme"].lost and "hung" in lessees["normalizer-acme"].lost[0]
    assert lessees["report-acme"].lost and lessees["boefje-acme"].lost


def test_a_claim_no_scheduler_took_up_is_released_in_the_end(store: Store) -> None:
    clock = FakeClock()
    add_organisation(store, "acme")
    # The held scheduler is not judged hung over the minutes this test moves its clock on.
    ownership = Ownership(store, LEASES, owner="host:1#aa", hung_after_seconds=3600, clock=clock)
    claims = ownership.claim(IDS)
    ownership.hold(claims["boefje-acme"], Lessee())
    ownership.renew()
    assert {owner for _hb, _lease, owner, _state in written(store).values()} == {ownership.owner}  # still coming
    clock.now += LEASES.lease_seconds + 1  # starting thousands of schedulers may take a while
    ownership.renew()
    assert {owner for _hb, _lease, owner, _state in written(store).values()} == {ownership.owner}
    clock.now += ABANDONED_AFTER_LEASES * LEASES.lease_seconds
    ownership.renew()
    owners = {scheduler_id: owner for scheduler_id, (_hb, _lease, owner, _state) in written(store).items()}
    assert owners == {"boefje-acme": ownership.owner, "normalizer-acme": None, "report-acme": None}


def test_a_disabled_queue_is_told_once_and_again_when_enabled(store: Store) -> None:
    ownership, lessees = holding(store)
    ownership.renew()
    with store.session() as session:
        session.execute(text("UPDATE schedulers SET enabled = false WHERE id = 'normalizer-acme'"))
    ownership.renew()
    ownership.renew()
    with store.session() as session:
        session.execute(text("UPDATE schedulers SET enabled = true WHERE id = 'normalizer-acme'"))
    ownership.renew()
    assert lessees["normalizer-acme"].enabled == [False, True]
    assert lessees["boefje-acme"].enabled == []


def test_a_stopped_process_that_holds_nothing_leaves_no_holder_row(store: Store) -> None:
    ownership, _lessees = holding(store)
    ownership.renew()
    ownership.release_all("stopped")
    ownership.stop()
    with store.session() as session:
        assert session.execute(text("SELECT count(*) FROM lease_holders")).scalar() == 0
