"""A pop given up at its deadline whose API process is SIGKILLed before the pop's statement commits: the
receipt it remembered in the database (service/receipts.py) brings its tasks back to their queue through
the next process's housekeeping, long before any task timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
from sqlalchemy import text

from baton.storage.engine import Store
from harness.factories import add_organisation, push
from harness.servers import wait_ready
from harness.waiting import free_port, wait_until

SLOW_POP_SECONDS = 3


def serve(url: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    environment = {
        "BATON_DATABASE_URL": url,
        "BATON_LOG_LEVEL": "warning",
        "BATON_DB_WAIT_SECONDS": "0.5",  # a pop answers 503 long before its slowed statement ends
        "BATON_TASK_TIMEOUT_SECONDS": "86400",  # no task timeout could bring them back in this test
        "BATON_RECONCILE_INTERVAL_SECONDS": "0.2",  # the director's housekeeping rounds
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--port", str(port)],
        env={**os.environ, **environment},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )


def slow_pops(store: Store) -> None:
    """Every change to a task takes SLOW_POP_SECONDS (a trigger), so a pop outlives its request."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION slow_change() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({SLOW_POP_SECONDS}); RETURN NEW; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER slow_change BEFORE UPDATE ON tasks FOR EACH ROW WHEN (NEW.status = 'dispatched') "
            "EXECUTE FUNCTION slow_change()"
        )


def statuses(store: Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        return dict(conn.execute(text("SELECT status, count(*) FROM tasks GROUP BY status")).all())  # type: ignore[arg-type]


def test_a_pop_whose_process_was_killed_before_it_committed_is_handed_back_by_the_next(pg_store: Store) -> None:
    add_organisation(pg_store, "acme", maxsize=0)
    push(pg_store, "boefje-acme", priority=1, data={"n": 1})
    slow_pops(pg_store)
    try:
        handed_back_by_the_next_process(pg_store)
    finally:
        with pg_store.engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS slow_change ON tasks")


def handed_back_by_the_next_process(pg_store: Store) -> None:
    port = free_port()
    first = serve(pg_store.url, port)
    try:
        wait_ready([f"http://127.0.0.1:{port}"])
        answer = httpx.post(f"http://127.0.0.1:{port}/queues/boefje-acme/pop", timeout=30)
        assert answer.status_code == 503, answer.text
        # Remembered before its client heard of the failure: nothing about it is only in memory now.
        with pg_store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM pending_settlements")).scalar() == 1
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    # The dead process's statement commits anyway: its task is dispatched, and nobody received it.
    assert wait_until(lambda: statuses(pg_store) == {"dispatched": 1}, SLOW_POP_SECONDS + 10)
    with pg_store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER slow_change ON tasks")
    second = serve(pg_store.url, free_port())
    try:  # the next process's housekeeping, not a task timeout (a day here)
        assert wait_until(lambda: statuses(pg_store) == {"queued": 1}, 60), statuses(pg_store)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    with pg_store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM pending_settlements")).scalar() == 0
