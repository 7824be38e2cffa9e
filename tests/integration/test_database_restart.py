"""A PostgreSQL restart is one outage for the process, whichever of its pools meets it and in which
order: connections opened before the outage are replaced, not used, once it has ended (the soak's
smoke run found an API replica logging one restart as two outages: its control pool, idle through
the restart, failed on its first lease after the main pool had seen the database back)."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from sqlalchemy import text

from baton.core.errors import DatabaseUnavailableError
from baton.storage.engine import Store
from baton.storage.errors import DATABASE
from harness.servers import ThrowawayPostgres


def answers(store: Store, *, control: bool = False) -> bool:
    session = store.control_session() if control else store.session()
    with session as s:
        return s.execute(text("SELECT 1")).scalar_one() == 1


def all_answer_at_once(store: Store, connections: int) -> bool:
    """`connections` sessions open together, so the main pool checks out (or opens) that many."""
    with ExitStack() as stack:
        sessions = [stack.enter_context(store.session()) for _ in range(connections)]
        return all(s.execute(text("SELECT 1")).scalar_one() == 1 for s in sessions)


@pytest.mark.parametrize("first", ["main", "control"])
def test_a_restart_is_one_outage_whichever_pool_meets_it(private_postgres: ThrowawayPostgres, first: str) -> None:
    store = Store(private_postgres.url)
    try:
        # Both pools hold a connection, and the main one several, opened before the restart.
        assert all_answer_at_once(store, 3)
        assert answers(store, control=True)
        outages = DATABASE.outages
        meets_it = first == "control"
        private_postgres.stop()
        with pytest.raises(DatabaseUnavailableError):
            answers(store, control=meets_it)
        assert DATABASE.outages == outages + 1 and not DATABASE.available
        private_postgres.start()
        assert answers(store, control=meets_it)
        assert DATABASE.available
        # The other pool's connections, and the rest of this one's, are replaced as they are checked out.
        assert all_answer_at_once(store, 3)
        assert answers(store, control=not meets_it)
        assert answers(store, control=meets_it)
        assert DATABASE.outages == outages + 1 and DATABASE.available
    finally:
        store.dispose()
