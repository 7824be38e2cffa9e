"""BATON_DATABASE_SCHEMA: Baton in a schema of its own in OpenKAT's scheduler database, beside mula's tables
in `public` (a stand-in of mula's at revision 0010). Every connection's search path is that schema only:
migrations, alembic's version table, the triggers and their functions, the schema probe, LISTEN/NOTIFY
wake-ups and the advisory locks of migration and leadership all work there, and mula's tables of the
same names are never touched."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from baton.control.leadership import DatabaseLeaseLeader
from baton.core.settings import LeaseSettings, Settings
from baton.runtime import build_app
from baton.storage.control.liveness import DatabaseUnreachableError, director_renewal
from baton.storage.engine import Store, head_revision, require_current_schema
from baton.storage.schema_probe import SchemaProbe
from harness.factories import add_organisation, push
from harness.servers import api_replicas
from harness.standins.mula_db import MulaDatabase, fill_example
from harness.waiting import wait_until
from tests.conftest import fresh_postgres_database
from tests.mula_checks import untouched

SCHEMA = "baton"
LEASES = LeaseSettings(lease_seconds=3, renew_deadline_seconds=2, retry_period_seconds=0.1)


@pytest.fixture
def shared() -> Iterator[str]:
    """mula's database (a stand-in at 0010, filled): the connection string Baton is given too."""
    with fresh_postgres_database("scheduler") as conninfo:
        fill_example(MulaDatabase(conninfo, "0010").create())
        yield conninfo


@pytest.fixture
def store(shared: str) -> Iterator[Store]:
    store = Store(shared, SCHEMA)
    store.migrate()
    yield store
    store.dispose()


def catalogue(conninfo: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(conninfo) as conn:
        return [tuple(row) for row in conn.execute(sql)]


def test_migrations_make_every_table_function_and_trigger_in_the_schema_and_leave_mulas_alone(shared: str) -> None:
    before = untouched(shared)
    store = Store(shared, SCHEMA)
    store.migrate()
    store.migrate()  # again: nothing to do
    try:
        assert store.migrations_current()
        require_current_schema(store)
        tables = {
            name for (name,) in catalogue(shared, f"SELECT tablename FROM pg_tables WHERE schemaname = '{SCHEMA}'")
        }
        assert {"tasks", "schedules", "alembic_version", "queue_counters", "organisations", "mula_imports"} <= tables
        public = {name for (name,) in catalogue(shared, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert public == {"tasks", "schedules", "alembic_version"}  # mula's, and nothing else
        assert catalogue(shared, f"SELECT version_num FROM {SCHEMA}.alembic_version") == [(head_revision(),)]
        assert catalogue(shared, "SELECT version_num FROM public.alembic_version") == [("0010",)]
        functions = catalogue(
            shared,
            "SELECT n.nspname, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname LIKE 'baton%'",
        )
        assert functions and {schema for schema, _ in functions} == {SCHEMA}
        triggers = catalogue(
            shared,
            "SELECT DISTINCT c.relnamespace::regnamespace::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE NOT t.tgisinternal",
        )
        assert triggers == [(SCHEMA,)]
    finally:
        store.dispose()
    assert untouched(shared) == before


def test_the_triggers_count_the_queues_and_the_schema_probe_reflects_the_schema(shared: str, store: Store) -> None:
    settings = Settings(database_url=shared, database_schema=SCHEMA)
    with TestClient(build_app(settings, store)) as client:
        client.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
        for number in range(3):
            pushed = client.post(
                "/queues/boefje-acme/push", json={"priority": 2, "data": {"n": number}, "hash": str(number)}
            )
            assert pushed.status_code == 201, pushed.text
        assert client.post("/queues/boefje-acme/pop").status_code == 200
        [queue] = [queue for queue in client.get("/queues").json() if queue["id"] == "boefje-acme"]
        assert (queue["size"], queue["in_flight"]) == (2, 1)
        assert client.get("/ui").status_code == 200
    schema = SchemaProbe(store).current()
    assert schema.scheduler_extras == [] and schema.workers is not None  # Baton's `workers`, found in its schema


def test_a_task_queued_by_another_process_wakes_a_pop_waiting_in_the_schema(shared: str, store: Store) -> None:
    """LISTEN/NOTIFY: the insert trigger's notification, from a function in the schema, reaches a waiting pop."""
    add_organisation(store, "acme", maxsize=0)
    env = {"BATON_DATABASE_SCHEMA": SCHEMA, "BATON_POP_RECHECK_SECONDS": "60", "BATON_POP_MAX_WAIT_SECONDS": "120"}
    with api_replicas(shared, 1, env) as [url], ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(httpx.post, f"{url}/schedulers/boefje/pop", params={"wait": 120}, timeout=180)

        def waiter_held() -> bool:
            metrics = httpx.get(f"{url}/metrics", timeout=10).text
            return "baton_pop_waiters 1.0" in metrics

        assert wait_until(waiter_held, 60)
        pushed = push(store, "boefje-acme", data={"n": 1})  # this process: another writer than the server
        results = waiting.result(timeout=180).json()["results"]
    assert [task["id"] for task in results] == [str(pushed.task["id"])]


def test_leadership_and_its_liveness_lock_work_in_the_schema(shared: str, store: Store) -> None:
    first, second = DatabaseLeaseLeader(store, "a:1", LEASES), DatabaseLeaseLeader(store, "b:2", LEASES)
    try:
        assert first.acquire_or_renew() and not second.acquire_or_renew()
        renewal = director_renewal(shared, SCHEMA)  # what `baton probe director` reads
        assert renewal is not None and renewal.holder == "a:1"
        with pytest.raises(DatabaseUnreachableError, match='relation "leaders" does not exist'):
            director_renewal(shared)  # without the schema: mula's `public`, which has no `leaders`
    finally:
        first.release()
        second.release()


def test_two_migrations_at_once_take_turns(shared: str) -> None:
    """The migration's advisory lock: both finish, one after the other, and the schema is made once."""
    stores = [Store(shared, SCHEMA), Store(shared, SCHEMA)]
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for done in [pool.submit(store.migrate) for store in stores]:
                done.result(timeout=120)
        assert all(store.migrations_current() for store in stores)
    finally:
        for store in stores:
            store.dispose()
