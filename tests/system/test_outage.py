"""Database outage: the API answers 503 while PostgreSQL is down and recovers by itself."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.servers import ThrowawayPostgres
from harness.waiting import free_port, wait_until


@pytest.fixture
def private_postgres() -> Iterator[ThrowawayPostgres]:
    if not os.environ.get("BATON_TEST_PG_BIN"):
        if os.environ.get("CI"):
            pytest.fail("BATON_TEST_PG_BIN is not set under CI: run the suite with scripts/test.sh")
        pytest.skip("no PostgreSQL binaries: run the suite with scripts/test.sh")
    # Not under tmp_path: the server runs as the postgres user, who cannot enter pytest's 0700 dirs.
    cluster = ThrowawayPostgres(Path(tempfile.mkdtemp(prefix="baton-outage-")))
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.stop()
        shutil.rmtree(cluster.directory, ignore_errors=True)


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
