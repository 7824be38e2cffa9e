"""Leases and fencing against real processes on PostgreSQL: directors and workers frozen past their
lease, killed, cut off; every scheduler write audited by triggers (harness.writelog).

Short leases (6 s, renew deadline 4 s, retry 0.25 s) keep this small. Timings are recorded, not
asserted (machines differ): bench/scenarios/leases.py measures them; here every fault must end with
all schedulers running from a live process, and the audit must show no write from a superseded
term and no state written by a process that did not own the row.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import seed_catalogue
from baton.runtime import prepare_store
from baton.storage.control.organisations import create_organisation
from harness.leasechaos import (
    EventFeeder,
    Member,
    Pool,
    leader_pid,
    leader_term,
    ownership,
    pool,
    terminate_connections_of,
    wait_for,
)
from harness.writelog import analyse, install
from tests.conftest import POSTGRES_URL, fresh_postgres_database

pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="needs PostgreSQL (scripts/test.sh starts one)")
ORGANISATIONS = 5  # 15 schedulers
RECOVERY_LIMIT = 60.0  # generous: a loaded CI machine; bench/ measures the real times


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_postgres_database("baton_leases") as url:
        store = prepare_store(Settings(database_url=url))
        with store.session() as session:
            seed_catalogue(session, None)
            for n in range(ORGANISATIONS):
                create_organisation(session, f"org{n}", f"Org {n}", maxsize=0)  # unbounded
        store.dispose()
        install(url)
        yield url


def feeding(url: str) -> EventFeeder:
    return EventFeeder(url, [f"org{n}" for n in range(ORGANISATIONS)], every=0.05)


def logs(members: Pool) -> str:
    """Every process's last lines: what a failed wait needs to be understood."""
    return "\n".join(f"--- {m.kind} {m.pid}\n{m.log()[-2500:]}" for m in members.members)


def all_running_under(url: str, member: Member) -> bool:
    state = ownership(url)
    return state.total > 0 and state.held_by(member) == state.total


def assert_clean_audit(url: str) -> None:
    audit = analyse(url)
    assert audit.claims > 0 and audit.tagged_writes > 0, audit.as_dict()
    assert audit.superseded == [], audit.superseded[:3]
    assert audit.orphan_marks == [], audit.orphan_marks[:3]


def test_directors_fail_over_on_freeze_kill_and_cut_connections_and_never_act_twice(database: str) -> None:
    with pool(database) as members, feeding(database):
        first = members.start("director")
        assert wait_for(lambda: leader_pid(database) == first.pid, RECOVERY_LIMIT) is not None, logs(members)
        second = members.start("director")
        assert wait_for(lambda: all_running_under(database, first), RECOVERY_LIMIT) is not None, logs(members)

        # 1. The leader freezes (SIGSTOP) past its lease, its connections open: the standby runs
        #    everything once the lease ran out, in a new term.
        term = leader_term(database)
        first.signal(signal.SIGSTOP)
        assert wait_for(lambda: all_running_under(database, second), RECOVERY_LIMIT) is not None, logs(members)
        assert leader_term(database) > term
        # ... and when it resumes it finds itself fenced: it writes nothing over the new term.
        first.signal(signal.SIGCONT)
        assert wait_for(lambda: "taken over by another director" in first.log(), RECOVERY_LIMIT) is not None, logs(
            members
        )
        assert wait_for(lambda: all_running_under(database, second), RECOVERY_LIMIT) is not None, (
            ownership(database),
            first.pid,
            second.pid,
            first.log()[-3000:],
            second.log()[-3000:],
        )

        # 2. The leader's connections are cut (a proxy, idle_session_timeout): either it reconnects
        #    first and keeps leading, or the standby finds the liveness lock free and takes over at
        #    once. Either way one live director runs everything again.
        assert terminate_connections_of(database, second.pid) > 0
        assert wait_for(lambda: leader_pid(database) in (first.pid, second.pid), RECOVERY_LIMIT) is not None, logs(
            members
        )
        leader, standby = (first, second) if leader_pid(database) == first.pid else (second, first)
        assert wait_for(lambda: all_running_under(database, leader), RECOVERY_LIMIT) is not None, logs(members)

        # 3. SIGKILL of the leader: the standby takes over (the liveness lock is freed with the process).
        leader.signal(signal.SIGKILL)
        assert wait_for(lambda: all_running_under(database, standby), RECOVERY_LIMIT) is not None, logs(members)
    assert_clean_audit(database)


def test_workers_share_hand_over_and_survive_a_frozen_peer(database: str) -> None:
    with pool(database) as members, feeding(database):
        first = members.start("worker")
        assert wait_for(lambda: all_running_under(database, first), RECOVERY_LIMIT) is not None, logs(members)
        second = members.start("worker")
        total = ownership(database).total
        balanced = lambda: sorted(ownership(database).owners.values()) == [total // 2, total - total // 2]  # noqa: E731
        assert wait_for(balanced, RECOVERY_LIMIT) is not None, logs(members)

        # A frozen worker's schedulers go to its peer once their leases run out...
        first.signal(signal.SIGSTOP)
        assert wait_for(lambda: all_running_under(database, second), RECOVERY_LIMIT) is not None, logs(members)
        # ... and when it resumes, its old claims are fenced; the two balance again.
        first.signal(signal.SIGCONT)
        assert wait_for(balanced, RECOVERY_LIMIT) is not None, logs(members)

        # SIGTERM hands everything over before the process exits.
        second.process.terminate()
        assert second.process.wait(30) == 0
        assert wait_for(lambda: all_running_under(database, first), RECOVERY_LIMIT) is not None, logs(members)
    assert_clean_audit(database)
