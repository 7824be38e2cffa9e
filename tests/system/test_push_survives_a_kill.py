"""OpenKAT's boefje push writes the task, its rescan schedule and the boefje's run in one statement
(storage/queues/push_statements.py): an API process SIGKILLed while that statement runs leaves either
all three or none of them, never a queued task without its schedule (which would never be rescanned)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid

import httpx
from sqlalchemy import text

from baton.storage.engine import Store
from harness.factories import add_organisation
from harness.servers import wait_ready
from harness.waiting import free_port, wait_until

SLOW_SECONDS = 3


def slow_task_inserts(store: Store) -> None:
    """Every new task row takes SLOW_SECONDS (a trigger after the row is written), so the push's
    statement is still running, its task row written, when its process is killed."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({SLOW_SECONDS}); RETURN NEW; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER slow_insert AFTER INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION slow_insert()"
        )


def sleeping_backends(store: Store) -> int:
    """Statements of other sessions waiting in the trigger's pg_sleep."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                    " AND datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        )


def written(store: Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {
            "tasks": conn.execute(text("SELECT count(*) FROM tasks")).scalar_one(),
            "tasks with their schedule": conn.execute(
                text("SELECT count(*) FROM tasks JOIN schedules ON schedules.id::text = tasks.schedule_id")
            ).scalar_one(),
            "schedules": conn.execute(text("SELECT count(*) FROM schedules")).scalar_one(),
            "runs": conn.execute(text("SELECT count(*) FROM boefje_runs")).scalar_one(),
        }


def test_a_boefje_push_killed_mid_statement_leaves_its_task_with_its_schedule_or_nothing(pg_store: Store) -> None:
    add_organisation(pg_store, "acme", maxsize=0)
    slow_task_inserts(pg_store)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env={**os.environ, "BATON_DATABASE_URL": pg_store.url, "BATON_LOG_LEVEL": "warning", "BATON_AUTH": "off"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready([f"http://127.0.0.1:{port}"])
        job_id = str(uuid.uuid4())
        body = {
            "id": job_id,
            "organisation": "acme",
            "priority": 1,
            "data": {
                "id": job_id,
                "boefje": {"id": "dns-records"},
                "input_ooi": "Hostname|internet|example.com",
                "organization": "acme",
            },
        }

        def send() -> None:
            with contextlib.suppress(httpx.HTTPError):  # its server is killed: no answer
                httpx.post(f"http://127.0.0.1:{port}/schedulers/boefje/push", json=body, timeout=30)

        client = threading.Thread(target=send, daemon=True)
        client.start()
        # The push's statement is running: its task row is written, the trigger sleeps after it.
        assert wait_until(lambda: sleeping_backends(pg_store) == 1, 30)
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        client.join(30)
        # The statement ends on its own (PostgreSQL notices the lost client only when it answers).
        assert wait_until(lambda: sleeping_backends(pg_store) == 0, SLOW_SECONDS + 30)
    finally:
        if server.poll() is None:
            server.kill()
        with pg_store.engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS slow_insert ON tasks")
    found = written(pg_store)
    # All or nothing: a task is never there without its schedule and run.
    assert found in (
        {"tasks": 1, "tasks with their schedule": 1, "schedules": 1, "runs": 1},
        {"tasks": 0, "tasks with their schedule": 0, "schedules": 0, "runs": 0},
    ), found
