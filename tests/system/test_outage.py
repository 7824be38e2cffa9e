"""Database outage: the API answers 503 while PostgreSQL is down and recovers by itself."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from baton.core.model import utcnow
from baton.core.queueing import PushRequest
from baton.storage.engine import Store
from baton.storage.queues.door import QueueDoor
from harness.factories import add_organisation
from harness.servers import ThrowawayPostgres
from harness.waiting import free_port, wait_until


def test_api_answers_503_during_an_outage_and_recovers(private_postgres: ThrowawayPostgres) -> None:
    port = free_port()
    env = {**os.environ, "BATON_DATABASE_URL": private_postgres.url}
    server = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def up() -> bool:
        try:
            return api.get("/ready").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(up, 60)
        api.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
        pushed = {
            api.post("/queues/boefje-acme/push", json={"priority": 1, "data": {}, "hash": f"h{n}"}).json()["id"]
            for n in range(30)
        }
        popped = [api.post("/queues/boefje-acme/pop").json()["id"] for _ in range(10)]

        private_postgres.stop()
        refused = api.post("/queues/boefje-acme/pop")
        assert refused.status_code == 503 and "database" in refused.json()["message"]
        assert api.post("/queues/boefje-acme/push", json={"priority": 1, "data": {}}).status_code == 503
        assert api.get("/health").status_code == 200  # liveness stays up: no restart storm
        assert api.get("/ready").status_code == 503

        private_postgres.start()
        assert wait_until(lambda: api.post("/queues/boefje-acme/pop").status_code == 200, 60), "did not recover"
        # That probe popped one task (or found none): count it, then drain the rest.
        listing = api.get("/tasks", params={"scheduler_id": "boefje-acme", "limit": 100}).json()
        assert listing["count"] == 30
        dispatched = {t["id"] for t in listing["results"] if t["status"] == "dispatched"}
        while (task := api.post("/queues/boefje-acme/pop").json()) is not None:
            popped.append(task["id"])
        final = api.get("/tasks", params={"scheduler_id": "boefje-acme", "limit": 100}).json()["results"]
        assert {t["id"] for t in final} == pushed, "a task was lost or invented"
        assert all(t["status"] == "dispatched" for t in final)
        assert len(popped) == len(set(popped)), "a task was handed out twice"
        assert set(popped) | dispatched == pushed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def test_a_replica_serves_again_as_soon_as_the_database_is_back(private_postgres: ThrowawayPostgres) -> None:
    """After an outage long enough for psycopg_pool's own back-off (1, 2, 4, 8 s... between
    reconnects) to leave the API's pool waiting for seconds after the server is back, the first
    requests after it accepts connections succeed: the pool tries at least once a second, and the
    first connection found broken replaced the pool's other stale ones (as the SQLAlchemy engine
    invalidates its own)."""
    port = free_port()
    env = {**os.environ, "BATON_DATABASE_URL": private_postgres.url}
    server = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        assert wait_until(lambda: _ready(api), 60)
        api.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
        with ThreadPoolExecutor(max_workers=8) as clients:  # the pool grows: stale connections after the stop
            pushes = clients.map(
                lambda n: api.post("/queues/boefje-acme/push", json={"priority": 1, "data": {}, "hash": f"h{n}"}),
                range(40),
            )
            assert all(push.is_success for push in pushes)
        assert api.get("/tasks", params={"scheduler_id": "boefje-acme"}).is_success  # the engine's too

        private_postgres.stop()
        outage = time.monotonic()
        # A pop on a stale connection, then one that waits for the pool's reconnect attempts, which
        # go on in the background from then on; a listing on the SQLAlchemy engine's stale connection.
        assert api.post("/queues/boefje-acme/pop").status_code == 503
        attempts = time.monotonic()
        assert api.post("/queues/boefje-acme/pop").status_code == 503
        assert api.get("/tasks", params={"scheduler_id": "boefje-acme"}).status_code == 503
        # psycopg_pool alone tries again 1, 3, 7, 15 and 31 s into its attempts: back at 18 s (any
        # time from 15 to 26 s), the pool would wait longer than a request waits for a connection (5 s).
        time.sleep(max(0.0, 18 - (time.monotonic() - attempts)))

        private_postgres.start()  # returns once the server accepts connections
        back = time.monotonic()
        # A push has one path (the pool); a pop whose pool connection does not come tries the engine.
        first_push = api.post("/queues/boefje-acme/push", json={"priority": 1, "data": {}, "hash": "after"})
        push_seconds = time.monotonic() - back
        first_pop = api.post("/queues/boefje-acme/pop")
        first_listing = api.get("/tasks", params={"scheduler_id": "boefje-acme"})
        print(f"outage {back - outage:.1f} s; the first push after the restart answered in {push_seconds:.2f} s")
        assert first_push.status_code == 201, first_push.text
        assert first_pop.status_code == 200 and first_pop.json() is not None, first_pop.text
        assert first_listing.status_code == 200, first_listing.text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def _ready(api: httpx.Client) -> bool:
    try:
        return api.get("/ready").status_code == 200
    except httpx.HTTPError:
        return False


def test_a_connection_found_broken_replaces_the_pools_stale_ones(private_postgres: ThrowawayPostgres) -> None:
    """The server went away with every idle connection of the API's pool: the first statement that
    finds its connection broken drains the pool, so no later request fails on another stale one."""
    store = Store(private_postgres.url)
    store.migrate()
    add_organisation(store, "acme")
    executor = QueueDoor(store)
    request = PushRequest(queue="boefje-acme", priority=1, data={})

    async def scenario() -> None:
        await executor.push(request, utcnow())  # opens the pool
        await executor.link.pool.resize(min_size=4)
        await executor.link.pool.wait()
        assert executor.link.pool.get_stats()["pool_available"] >= 4  # every one of them goes stale below
        private_postgres.stop()
        with pytest.raises(Exception):  # noqa: B017 - the driver's error, however it is mapped
            await executor.push(request, utcnow())
        assert executor.link.pool.get_stats().get("pool_available", 0) == 0, "stale connections left in the pool"
        private_postgres.start()
        assert (await executor.push(request, utcnow())).created

    async def run() -> None:
        try:
            await scenario()
        finally:
            await executor.close()

    try:
        asyncio.run(run())
    finally:
        store.dispose()


def test_every_request_answers_503_within_the_database_wait(private_postgres: ThrowawayPostgres) -> None:
    """BATON_DB_WAIT_SECONDS is one deadline per request, whatever paths it tries: with the database
    stopped, pops (the fast path and the route), pushes and status changes answer 503 with
    Retry-After within it (a generous bound: the machine may be loaded)."""
    wait = 2.0
    port = free_port()
    env = {**os.environ, "BATON_DATABASE_URL": private_postgres.url, "BATON_DB_WAIT_SECONDS": str(wait)}
    server = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        assert wait_until(lambda: _ready(api), 60)
        api.post("/organisations", json={"id": "acme", "name": "Acme"}).raise_for_status()
        for n in range(3):
            api.post("/queues/boefje-acme/push", json={"priority": 1, "data": {}, "hash": f"h{n}"}).raise_for_status()
        task = api.post("/queues/boefje-acme/pop").json()

        private_postgres.stop()
        requests = [
            ("POST", "/queues/boefje-acme/pop", None),  # the fast path
            ("POST", "/queues/boefje-acme/pop", {"filters": []}),  # the route
            ("POST", "/schedulers/boefje/pop?limit=2", None),
            ("POST", "/queues/boefje-acme/push", {"priority": 1, "data": {}}),
            ("PATCH", f"/tasks/{task['id']}", {"status": "running"}),
        ]
        timings = []
        for _ in range(2):  # the first meet broken connections, the next wait for new ones
            for method, path, body in requests:
                started = time.monotonic()
                answer = api.request(method, path, json=body)
                took = time.monotonic() - started
                timings.append((method, path, answer.status_code, round(took, 2)))
                assert answer.status_code == 503, (method, path, answer.text)
                assert answer.headers.get("Retry-After"), (method, path)
                assert took <= wait + 1.5, timings
        print("answers during the outage:", timings)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
