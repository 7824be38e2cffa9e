"""Leadership by lease and scheduler ownership with fencing, on both backends (storage/control/leadership.py,
storage/control/scheduler_leases.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from baton.control.director import Director
from baton.control.leadership import DatabaseLeaseLeader
from baton.control.runners import ThreadRunner
from baton.core.errors import FencedError
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType, utcnow
from baton.core.queueing import PushRequest
from baton.core.settings import LeaseSettings
from baton.ingest.ownership import Ownership, owner_prefix
from baton.ingest.registry import build_scheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.control import pool_changes, scheduler_leases
from baton.storage.control import workers as worker_rows
from baton.storage.control.leadership import LIVENESS_LOCK_KEY
from baton.storage.control.organisations import delete_organisation
from baton.storage.engine import Store
from baton.storage.queues import operations as queues
from baton.storage.scheduling.inbox import enqueue_event
from baton.storage.tables import Scheduler as SchedulerRow
from harness.factories import add_organisation, fast_settings
from harness.waiting import wait_until
from harness.writelog import analyse, install
from tests.conftest import fresh_postgres_database

LEASES = LeaseSettings(lease_seconds=3, renew_deadline_seconds=2, retry_period_seconds=0.1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def expire_leadership(store: Store) -> None:
    """What the passing of the lease time does, without waiting for it."""
    with store.session() as session:
        session.execute(text("UPDATE leaders SET expires_at = :past"), {"past": "2000-01-01 00:00:00"})


def expire_scheduler_leases(store: Store) -> None:
    with store.session() as session:
        session.execute(text("UPDATE schedulers SET lease_expires_at = :past"), {"past": "2000-01-01 00:00:00"})


def test_one_leader_at_a_time_and_every_takeover_is_a_new_term(store: Store) -> None:
    first, second = DatabaseLeaseLeader(store, "a:1", LEASES), DatabaseLeaseLeader(store, "b:2", LEASES)
    assert first.acquire_or_renew() and first.term == 1
    assert not second.acquire_or_renew()
    assert first.acquire_or_renew() and first.term == 1  # renewing keeps the term
    first.release()
    assert second.acquire_or_renew() and second.term == 2
    assert not first.acquire_or_renew()
    second.release()


def test_a_frozen_leader_loses_the_lease_and_cannot_renew_after_a_takeover(store: Store) -> None:
    frozen, standby = DatabaseLeaseLeader(store, "a:1", LEASES), DatabaseLeaseLeader(store, "b:2", LEASES)
    assert frozen.acquire_or_renew()
    assert not standby.acquire_or_renew()  # the lease is still running
    expire_leadership(store)  # the holder was frozen (SIGSTOP) past its lease, connection open or not
    assert standby.acquire_or_renew() and standby.term == 2
    assert not frozen.acquire_or_renew() and frozen.term is None  # resumed: its term is gone
    standby.release()


def test_a_leader_that_cannot_renew_within_the_deadline_steps_down(store: Store) -> None:
    clock = FakeClock()
    leader = DatabaseLeaseLeader(store, "a:1", LEASES, clock=clock)
    assert leader.acquire_or_renew()
    clock.now += LEASES.renew_deadline_seconds + 0.5  # renewed, but too late (it was frozen)
    assert not leader.acquire_or_renew() and leader.term is None
    assert leader.acquire_or_renew() and leader.term == 2  # a fresh term, not the old one carried on
    leader.release()


def test_a_claim_is_a_new_term_and_fencing_refuses_the_previous_one(store: Store) -> None:
    add_organisation(store, "acme")
    with store.session() as session:
        (first,) = scheduler_leases.claim_schedulers(session, ["boefje-acme"], "w1#a", 10)
    with store.session() as session:
        assert scheduler_leases.claim_schedulers(session, ["boefje-acme"], "w2#b", 10) == []  # held
    expire_scheduler_leases(store)
    with store.session() as session:
        (second,) = scheduler_leases.claim_schedulers(session, ["boefje-acme"], "w2#b", 10)
    assert second.term == first.term + 1
    with store.session() as session:
        scheduler_leases.fence(session, second)
    with pytest.raises(FencedError, match="no longer ours"), store.session() as session:
        scheduler_leases.fence(session, first)
    with store.session() as session:  # the old claim can neither renew nor release the row
        assert scheduler_leases.renew_claims(session, [first], 10) == {}
        assert scheduler_leases.release_claims(session, [first], "stopped") == 0
        row = session.get(SchedulerRow, "boefje-acme")
        assert row is not None and row.owner == "w2#b" and row.term == second.term


def test_claims_under_a_leadership_term_only_while_it_is_current(store: Store) -> None:
    add_organisation(store, "acme")
    leader = DatabaseLeaseLeader(store, "a:1", LEASES)
    assert leader.acquire_or_renew() and leader.term is not None
    with store.session() as session:
        stale = scheduler_leases.claim_schedulers(session, ["boefje-acme"], "a#1", 10, leader_term=leader.term + 1)
        current = scheduler_leases.claim_schedulers(session, ["normalizer-acme"], "a#1", 10, leader_term=leader.term)
    assert stale == [] and [claim.scheduler_id for claim in current] == ["normalizer-acme"]
    leader.release()


def test_a_scheduler_whose_row_is_taken_over_stops_without_writing(store: Store) -> None:
    add_organisation(store, "acme")
    settings = fast_settings(store.url)
    context = SchedulerContext(store=store, settings=settings, runner="thread", location="t")
    runner = ThreadRunner(context)
    try:
        assert runner.start_many(sorted(runner_specs())) == sorted(spec.id for spec in runner_specs())
        running = SchedulerState.RUNNING.value
        assert wait_until(lambda: all(state_of(store, spec.id) == running for spec in runner_specs()), 20)
        with store.session() as session:  # what a new leader does first: fence every previous term out
            session.execute(text("UPDATE schedulers SET owner = NULL, term = term + 1, lease_expires_at = NULL"))
        assert wait_until(lambda: not any(runner.status(s.id) == SchedulerState.RUNNING for s in runner_specs()), 20)
        with store.session() as session:
            rows = session.query(SchedulerRow).all()
            # nobody wrote `stopped` over rows that are no longer theirs
            assert {row.owner for row in rows} == {None} and {row.state for row in rows} == {"running"}
    finally:
        runner.shutdown()


def runner_specs() -> list[SchedulerSpec]:
    return [SchedulerSpec("acme", kind) for kind in SchedulerType]


def state_of(store: Store, scheduler_id: str) -> str | None:
    with store.session() as session:
        row = session.get(SchedulerRow, scheduler_id)
        return None if row is None else row.state


def test_ownership_renews_in_one_round_and_tells_the_loser(store: Store) -> None:
    add_organisation(store, "acme")
    ownership = Ownership(store, LEASES, owner="w#1")
    claims = ownership.claim(["boefje-acme", "normalizer-acme"])
    lost: list[str] = []

    class Lessee:
        def __init__(self, name: str) -> None:
            self.name = name

        def lease_lost(self, reason: str) -> None:
            lost.append(self.name)

        def set_enabled(self, enabled: bool) -> None:
            return None

    for scheduler_id, claim in claims.items():
        ownership.hold(claim, Lessee(scheduler_id))
    ownership.renew()
    assert lost == []
    with store.session() as session:
        session.execute(text("UPDATE schedulers SET term = term + 1 WHERE id = 'boefje-acme'"))
    ownership.renew()
    assert lost == ["boefje-acme"] and [claim.scheduler_id for claim in ownership.held()] == ["normalizer-acme"]


def test_only_the_leading_director_reconciles_and_a_new_term_fences_the_old(store: Store) -> None:
    add_organisation(store, "acme")
    settings = fast_settings(store.url)

    def director(holder: str) -> Director:
        context = SchedulerContext(store=store, settings=settings, runner="thread", location=holder)
        return Director(store, settings, ThreadRunner(context), DatabaseLeaseLeader(store, holder, LEASES), holder)

    leader, standby = director("a:1"), director("b:2")
    try:
        assert leader.step() is not None and len(leader.runner.list()) == 3
        assert standby.step() is None and standby.runner.list() == []
        expire_leadership(store)  # the leader froze past its lease
        report = standby.step()
        assert report is not None and standby.term == 2
        # The old leader's schedulers were fenced out by the new term at once, the new ones claim.
        new_owner = standby_owner(standby)
        assert wait_until(lambda: owners(store) == {new_owner}, 20)
        assert leader.step() is None  # resumed: it no longer leads and stops what it ran
        assert leader.runner.list() == []
    finally:
        leader.stop()
        standby.stop()


def standby_owner(director: Director) -> str:
    assert isinstance(director.runner, ThreadRunner)
    return director.runner.context.leases().owner


def owners(store: Store) -> set[str | None]:
    with store.session() as session:
        return {row.owner for row in session.query(SchedulerRow).all()}


def kill_lock_connection(store: Store) -> None:
    """pg_terminate_backend on the liveness lock's holder, and wait until the server freed the lock
    (termination is asynchronous)."""
    # Advisory locks are per database: other tests' databases on the server hold the same key.
    this_database = "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    held = text(
        f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :key AND granted AND {this_database}"
    )
    with store.engine.connect() as admin:
        admin.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_locks "
                f"WHERE locktype = 'advisory' AND objid = :key AND granted AND {this_database}"
            ),
            {"key": LIVENESS_LOCK_KEY},
        )
        admin.commit()

        def freed() -> bool:
            count = admin.execute(held, {"key": LIVENESS_LOCK_KEY}).scalar()
            admin.commit()
            return count == 0

        assert wait_until(freed, 10)


def test_on_postgresql_a_dead_holder_is_replaced_at_once_not_after_its_lease(pg_store: Store) -> None:
    """The liveness lock: when the leader's connection dies (SIGKILL, a proxy dropping it), a standby
    takes over without waiting for the lease, in a new term; the old holder cannot renew after that."""
    first, second = DatabaseLeaseLeader(pg_store, "a:1", LEASES), DatabaseLeaseLeader(pg_store, "b:2", LEASES)
    try:
        assert first.acquire_or_renew()
        assert not second.acquire_or_renew()  # the holder is alive: its lease counts
        kill_lock_connection(pg_store)
        assert second.acquire_or_renew() and second.term == 2  # long before the 3 s lease ends
        assert not first.acquire_or_renew()
    finally:
        first.release()
        second.release()


def test_on_postgresql_a_standby_director_replaces_a_dead_leader_long_before_its_retry_period(
    pg_store: Store,
) -> None:
    """A standby director on a database lease asks for the lead every STANDBY_RETRY_SECONDS, not every
    retry period: when the leader's connection dies (its container killed), the standby leads within
    moments. Here the retry period is a minute: asking only at that pace, it would still be waiting."""
    slow = {"retry_period_seconds": 60.0, "renew_deadline_seconds": 90.0, "lease_seconds": 120.0}
    settings = fast_settings(pg_store.url, **slow)

    def director(holder: str) -> Director:
        context = SchedulerContext(store=pg_store, settings=settings, runner="thread", location=holder)
        elector = DatabaseLeaseLeader(pg_store, holder, settings.leases)
        return Director(pg_store, settings, ThreadRunner(context), elector, holder)

    leader, standby = director("a:1"), director("b:2")
    try:
        assert leader.step() is not None
        standby.start_in_background()
        assert wait_until(lambda: standby._said_following, 10)  # its first attempt found the lead taken
        assert standby.next_attempt_in() < settings.leases.retry_period_seconds
        kill_lock_connection(pg_store)
        assert wait_until(lambda: standby.is_leader, 10)  # the lease itself runs for two more minutes
        assert standby.term == 2
        assert standby.next_attempt_in() == settings.leases.retry_period_seconds  # leading: renews at its pace
    finally:
        standby.stop()
        leader.stop()


def test_get_schedulers_shows_owner_term_lease_and_the_leader(client: TestClient, store: Store) -> None:
    add_organisation(store, "acme")
    leader = DatabaseLeaseLeader(store, "host-a:12", LEASES)
    assert leader.acquire_or_renew()
    with store.session() as session:
        (claim,) = scheduler_leases.claim_schedulers(
            session, ["boefje-acme"], "host-a:12#ab", 10, leader_term=leader.term
        )
    rows = {row["id"]: row for row in client.get("/schedulers").json()}
    boefje = rows["boefje-acme"]
    assert boefje["owner"] == "host-a:12#ab" and boefje["term"] == claim.term and boefje["lease_expires_at"]
    assert rows["report-acme"]["owner"] is None and rows["report-acme"]["term"] == 0
    assert boefje["leader"]["holder"] == "host-a:12" and boefje["leader"]["term"] == leader.term
    assert boefje["leader"]["lease_expires_at"] is not None
    assert client.get("/schedulers/boefje-acme").json()["owner"] == "host-a:12#ab"
    leader.release()


def test_the_write_audit_sees_a_write_from_a_superseded_term(pg_store: Store) -> None:
    """The audit the chaos tests rely on must be able to fail: a write declared under an old claim
    after a newer claim, and a row marked stopped by a non-owner, are both reported."""
    with fresh_postgres_database("baton_audit") as url:
        store = Store(url)
        try:
            store.migrate()
            add_organisation(store, "acme")
            install(url)
            with store.session() as session:
                (old,) = scheduler_leases.claim_schedulers(session, ["boefje-acme"], "a:1#x", 10)
            with store.session() as session:  # a fenced write, under the current claim: fine
                scheduler_leases.fence(session, old)
                queues.push(session, PushRequest(queue="boefje-acme", priority=1, data={}), utcnow())
            expire_scheduler_leases(store)
            with store.session() as session:
                (new,) = scheduler_leases.claim_schedulers(session, ["boefje-acme"], "b:2#y", 10)
            assert analyse(url).superseded == []
            with store.session() as session:  # what an unfenced old owner would do now
                session.execute(text("SELECT set_config('baton.claim', :claim, true)"), {"claim": "a:1#x/1"})
                queues.push(session, PushRequest(queue="boefje-acme", priority=1, data={}), utcnow())
            with store.session() as session:  # a state written over a row the writer does not own
                session.execute(text("UPDATE schedulers SET state = 'stopped' WHERE id = 'boefje-acme'"))
                session.execute(text("UPDATE schedulers SET owner = NULL WHERE id = 'boefje-acme'"))
                session.execute(text("UPDATE schedulers SET state = 'failed' WHERE id = 'boefje-acme'"))
            audit = analyse(url)
            assert [entry["claim"] for entry in audit.superseded] == ["a:1#x/1"]
            assert [entry["state"] for entry in audit.orphan_marks] == ["failed"]
            assert new.term == old.term + 1
        finally:
            store.dispose()


def test_a_scheduler_write_after_a_takeover_is_refused_and_nothing_commits(store: Store) -> None:
    add_organisation(store, "acme")
    settings = fast_settings(store.url)
    context = SchedulerContext(store=store, settings=settings, runner="thread", location="t")
    scheduler = build_scheduler(SchedulerSpec("acme", SchedulerType.NORMALIZER), context)
    scheduler.setup()
    assert scheduler.tick() == 0  # claims the row; an empty inbox writes nothing
    with store.session() as session:
        session.execute(text("UPDATE schedulers SET term = term + 1 WHERE id = 'normalizer-acme'"))
        enqueue_event(session, "normalizer-acme", "raw_file_received", RAW_EVENT)
    with pytest.raises(FencedError, match="no longer ours"):
        scheduler.tick()
    with store.session() as session:
        assert session.scalar(text("SELECT count(*) FROM tasks")) == 0
        assert session.scalar(text("SELECT count(*) FROM events WHERE consumed_at IS NULL")) == 1
    scheduler.teardown()


RAW_EVENT = {"type": "raw_file_received", "raw_file": {"id": "r1", "mime_types": ["boefje/dns-records"]}}


def test_on_postgresql_a_dead_holder_is_replaced_at_once_after_renewals_too(pg_store: Store) -> None:
    """Renewing keeps the lease row's record of the liveness lock: a holder killed after several
    rounds is replaced at once, as in its first round."""
    first, second = DatabaseLeaseLeader(pg_store, "a:1", LEASES), DatabaseLeaseLeader(pg_store, "b:2", LEASES)
    try:
        assert first.acquire_or_renew() and first.acquire_or_renew() and first.acquire_or_renew()
        assert not second.acquire_or_renew()
        kill_lock_connection(pg_store)
        assert second.acquire_or_renew() and second.term == 2  # long before the 3 s lease ends
    finally:
        first.release()
        second.release()


def test_on_postgresql_a_lock_freed_by_a_server_restart_deposes_nobody(pg_store: Store) -> None:
    """A restart of PostgreSQL frees the leader's liveness lock with every other connection: a standby
    that gets the lock first must not take that for the leader's death (its lease still counts), and
    the leader renews in the same term. The restart is played by a last renewal dated before the
    server started, and the lock connection ended."""
    first, second = DatabaseLeaseLeader(pg_store, "a:1", LEASES), DatabaseLeaseLeader(pg_store, "b:2", LEASES)
    try:
        assert first.acquire_or_renew()
        with pg_store.session() as session:
            session.execute(text("UPDATE leaders SET renewed_at = pg_postmaster_start_time() - interval '1 second'"))
        kill_lock_connection(pg_store)
        assert not second.acquire_or_renew()  # it got the lock, but the lock said nothing
        assert first.acquire_or_renew() and first.term == 1
        kill_lock_connection(pg_store)  # renewed on this server since: now a dead holder is replaced at once
        assert second.acquire_or_renew() and second.term == 2
    finally:
        first.release()
        second.release()


def test_a_claimant_does_not_claim_again_what_it_runs_when_the_lease_lapsed(store: Store) -> None:
    """Renewals late under load let a lease lapse while its scheduler still runs here: claiming the
    row again would fence out that very scheduler (and leave the new claim run by nobody)."""
    add_organisation(store, "acme")
    with store.session() as session:
        first = scheduler_leases.claim_unowned(session, "w:1#a", 10, LEASES.lease_seconds)
    assert len(first) == 3
    expire_scheduler_leases(store)
    running = [claim.scheduler_id for claim in first if claim.scheduler_id != "boefje-acme"]
    with store.session() as session:
        again = scheduler_leases.claim_unowned(session, "w:1#a", 10, LEASES.lease_seconds, running_here=running)
    assert [claim.scheduler_id for claim in again] == ["boefje-acme"]  # the one no longer running here
    with store.session() as session:
        renewed = scheduler_leases.renew_claims(session, [claim for claim in first if claim.scheduler_id in running], 3)
    assert sorted(renewed) == sorted(running)  # still ours: the lapsed leases renew


def test_on_postgresql_a_frozen_transaction_locking_a_lapsed_row_is_ended(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process frozen mid-transaction keeps its row locks (no idle timeout applies mid-pipeline):
    once its lease ran out, the next claimant ends that transaction instead of skipping the row for
    as long as the freeze; a process whose lease still runs is left alone."""
    monkeypatch.setattr(scheduler_leases, "LAPSED_LOCK_SECONDS", 0.0)
    add_organisation(pg_store, "acme")
    ownership = Ownership(pg_store, LEASES, owner="b:2#y")
    with pg_store.session() as session:
        (lapsed,) = scheduler_leases.claim_schedulers(session, ["boefje-acme"], "a:1#x", -1)  # ran out already
        scheduler_leases.claim_schedulers(session, ["normalizer-acme"], "c:3#z", 60)
    with pg_store.engine.connect() as frozen, pg_store.engine.connect() as live:
        for conn, process, scheduler_id in ((frozen, "1@a", "boefje-acme"), (live, "3@c", "normalizer-acme")):
            conn.execute(text(f"SET application_name = 'baton {process}'"))  # engine.connection_name()
            conn.execute(text("SET idle_in_transaction_session_timeout = 0"))  # as mid-pipeline
            conn.execute(text("SELECT * FROM schedulers WHERE id = :id FOR SHARE"), {"id": scheduler_id})
        assert ownership.claim(["boefje-acme", "normalizer-acme"]) == {}  # both locked: skipped
        with pytest.raises(DBAPIError, match="terminat"):
            frozen.execute(text("SELECT 1"))
        assert live.execute(text("SELECT 1")).scalar() == 1
    assert wait_until(lambda: set(ownership.claim(["boefje-acme"])) == {"boefje-acme"}, timeout=10)
    assert leases_term(pg_store, "boefje-acme") == lapsed.term + 1


def test_every_connection_is_named_after_its_process_as_lease_owners_are(pg_store: Store) -> None:
    with pg_store.engine.connect() as conn:
        name = conn.execute(text("SELECT current_setting('application_name')")).scalar()
    host, pid = owner_prefix(os.getpid()).rstrip("#").split(":")
    assert name == f"baton {pid}@{host}"[:63]


def leases_term(store: Store, scheduler_id: str) -> int:
    with store.session() as session:
        return int(session.scalar(text("SELECT term FROM schedulers WHERE id = :id"), {"id": scheduler_id}))


def test_on_postgresql_workers_are_woken_when_the_pool_changes(pg_store: Store) -> None:
    """A worker waits for its next round or for a peer's announcement (joined, left, gave schedulers
    up), whichever comes first: hand-overs do not wait for the round."""
    stop = threading.Event()
    changes = pool_changes.PoolChanges(pg_store.address, stop)
    try:
        changes.wait(0)  # listening from now on
        woke = threading.Event()
        waiter = threading.Thread(target=lambda: (changes.wait(60), woke.set()), daemon=True)
        waiter.start()
        with pg_store.session() as session:
            pool_changes.announce_pool_change(session)
        assert woke.wait(30), "still waiting for the 60 s round after an announcement"
    finally:
        stop.set()
        changes.close()


def test_a_worker_whose_scheduler_lease_ended_is_counted_out_before_its_row_ends(store: Store) -> None:
    """A SIGKILLed worker's scheduler leases may end before its own row (they are renewed at other
    times); its peers must not wait for the row to count it out and take its share."""
    add_organisation(store, "acme")
    with store.session() as session:
        worker_rows.heartbeat_worker(session, "alive#1", 30)
        worker_rows.heartbeat_worker(session, "killed#1", 30)
        worker_rows.heartbeat_worker(session, "idle#1", 30)  # holds nothing: live while its row is
        scheduler_leases.claim_schedulers(session, ["boefje-acme"], "alive#1", 30)
        scheduler_leases.claim_schedulers(session, ["normalizer-acme"], "killed#1", 30)
        assert worker_rows.live_workers(session) == ["alive#1", "idle#1", "killed#1"]
        scheduler_leases.claim_schedulers(session, ["report-acme"], "killed#1", -1)  # this one's lease has ended
    with store.session() as session:
        assert worker_rows.live_workers(session) == ["alive#1", "idle#1"]


def test_a_worker_learns_when_the_first_lease_of_a_peer_ends(store: Store) -> None:
    add_organisation(store, "acme")
    with store.session() as session:
        assert worker_rows.seconds_until_a_peer_lease_ends(session, "me#1") is None
        worker_rows.heartbeat_worker(session, "me#1", 1)  # our own leases end sooner: not counted
        scheduler_leases.claim_schedulers(session, ["normalizer-acme"], "me#1", 1)
        scheduler_leases.claim_schedulers(session, ["boefje-acme"], "peer#1", 20)
        scheduler_leases.claim_schedulers(session, ["report-acme"], "peer#2", -1)  # ended already: not what comes next
    with store.session() as session:
        scheduler_only = worker_rows.seconds_until_a_peer_lease_ends(session, "me#1")
        worker_rows.heartbeat_worker(session, "peer#1", 10)
    with store.session() as session:
        with_worker = worker_rows.seconds_until_a_peer_lease_ends(session, "me#1")
    assert scheduler_only is not None and 15 < scheduler_only <= 20
    assert with_worker is not None and 5 < with_worker <= 10


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def test_an_idle_worker_reads_only_the_running_leases_of_its_peers(pg_store: Store) -> None:
    """The peers' claims ended long ago (their holder rows renew them): the statement an idle worker
    sends every round must find that out from the index on the claims' leases, not by reading every
    row a peer owns (the database's clock is volatile: compared with it directly, no index applies)."""
    organisations = [f"org{n:03d}" for n in range(200)]
    for organisation in organisations:
        add_organisation(pg_store, organisation)
    with pg_store.session() as session:
        ids = [f"{kind}-{organisation}" for organisation in organisations for kind in ("boefje", "normalizer")]
        scheduler_leases.claim_schedulers(session, ids, "peer#1", -1)  # every claim's own lease has ended
        scheduler_leases.claim_schedulers(session, ["report-org000"], "peer#2", 20)  # one still runs
    with pg_store.session() as session:
        session.execute(text("ANALYZE schedulers"))
    with pg_store.session() as session:
        statement = worker_rows.peer_lease_ends(session, "me#1")
        sql = statement.compile(dialect=session.bind.dialect, compile_kwargs={"literal_binds": True})  # type: ignore[union-attr]
        (explained,) = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()
        until = worker_rows.seconds_until_a_peer_lease_ends(session, "me#1")
    nodes = list(_plan_nodes(explained["Plan"]))
    on_schedulers = [node for node in nodes if node.get("Relation Name") == "schedulers"]
    assert on_schedulers, nodes
    read = sum(
        node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0) for node in on_schedulers
    )
    assert read <= 5, f"{read} scheduler rows read for one running lease: {on_schedulers}"
    assert until is not None and 15 < until <= 20


def test_a_worker_counts_the_schedulers_of_existing_organisations(store: Store) -> None:
    """Counted without joining the organisations: a deleted organisation's schedulers go with it."""
    add_organisation(store, "acme")
    add_organisation(store, "globex")
    with store.session() as session:
        assert worker_rows.count_schedulers(session) == 6
        delete_organisation(session, "acme")
    with store.session() as session:
        assert worker_rows.count_schedulers(session) == 3
