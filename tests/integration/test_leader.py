"""Leader election on PostgreSQL: one director leads; failover when the leader goes away."""

from __future__ import annotations

from sqlalchemy import text

from baton.control.director import Director
from baton.control.leadership import AdvisoryLockLeader
from baton.control.runners import ThreadRunner
from baton.core.settings import Settings
from baton.ingest.schedulers import SchedulerContext
from baton.storage.engine import Store
from baton.storage.organisations import create_organisation


def test_only_one_elector_leads_and_release_hands_over(pg_store: Store) -> None:
    first, second = AdvisoryLockLeader(pg_store), AdvisoryLockLeader(pg_store)
    try:
        assert first.acquire_or_renew()
        assert not second.acquire_or_renew()
        assert first.acquire_or_renew()  # renewing keeps the lead
        first.release()
        assert second.acquire_or_renew()
        assert not first.acquire_or_renew()
    finally:
        first.release()
        second.release()


def test_leader_whose_connection_dies_loses_the_lead_and_a_standby_takes_over(pg_store: Store) -> None:
    first, second = AdvisoryLockLeader(pg_store), AdvisoryLockLeader(pg_store)
    try:
        assert first.acquire_or_renew()
        with pg_store.engine.connect() as admin:
            admin.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks "
                    "WHERE locktype = 'advisory' AND objid = :key AND granted"
                ),
                {"key": first.key},
            )
        assert not first.acquire_or_renew()
        assert second.acquire_or_renew()
    finally:
        first.release()
        second.release()


def test_only_the_leading_director_reconciles(pg_store: Store) -> None:
    with pg_store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=10)
    settings = Settings(database_url=pg_store.url, poll_interval_seconds=0.05)

    def director() -> Director:
        context = SchedulerContext(store=pg_store, settings=settings, runner="thread", location="t")
        return Director(pg_store, settings, ThreadRunner(context), AdvisoryLockLeader(pg_store))

    leader, standby = director(), director()
    try:
        assert leader.step() is not None and len(leader.runner.list()) == 3
        assert standby.step() is None and standby.runner.list() == []
        leader.stop()  # releases the lock and stops its schedulers
        report = standby.step()
        assert report is not None and len(report.started) == 3
    finally:
        leader.stop()
        standby.stop()
