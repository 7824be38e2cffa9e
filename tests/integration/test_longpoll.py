"""Long-poll pops (`?wait=seconds`) against real `baton serve` processes on both databases.

No timing thresholds: a test starts a waiting pop, waits until the server counts it as a waiter (the
`baton_pop_waiters` gauge), then queues a task and asserts the pop's answer. The waits asked for are
long (the pop must be woken, not time out) unless a test wants the time to run out.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from baton.core.model import TaskStatus
from baton.storage.engine import Store
from baton.storage.queues.wakeups import APPLICATION_NAME, ChangeWatcher
from baton.storage.urls import libpq_conninfo
from harness.factories import add_organisation, finish, pop, push
from harness.servers import api_replicas
from harness.waiting import free_port, wait_until

LONG = 120  # seconds a pop may wait: far longer than a wake-up takes, well within the test's timeout
SETTLE = 60  # seconds allowed for a condition to come true
QUEUE = "boefje-acme"
# Only a wake-up answers: nobody looks again on a timer (SQLite's file watcher included).
NO_RECHECK = {"BATON_POP_RECHECK_SECONDS": "60", "BATON_POP_MAX_WAIT_SECONDS": str(LONG)}
QUICK_RECHECK = {"BATON_POP_RECHECK_SECONDS": "0.1", "BATON_POP_MAX_WAIT_SECONDS": str(LONG)}
# BATON_HTTP_SERVER: what the app learns of a client and a signal through ASGI is each server's to tell.
HTTP_SERVERS = ["uvicorn", "granian"]


@pytest.fixture
def acme(store: Store) -> Store:
    add_organisation(store, "acme", maxsize=0)
    return store


def waiters(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("baton_pop_waiters "):
            return float(line.split()[1])
    raise AssertionError("no baton_pop_waiters gauge in /metrics")


def await_waiters(url: str, count: int) -> None:
    assert wait_until(lambda: waiters(url) == count, timeout=SETTLE), f"the server never held {count} waiter(s)"


@contextmanager
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def waiting_pop(pool: ThreadPoolExecutor, url: str, path: str = f"/queues/{QUEUE}/pop", wait: float = LONG) -> Future:
    return pool.submit(httpx.post, f"{url}{path}", params={"wait": wait}, timeout=LONG + SETTLE)


def answer(future: Future[httpx.Response]) -> Any:
    response = future.result(timeout=LONG + SETTLE)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def server(acme: Store) -> Iterator[str]:
    """One `baton serve` on the default HTTP server: the waiting itself is the app's, whichever serves it."""
    with api_replicas(acme.url, 1, NO_RECHECK) as urls:
        yield urls[0]


@pytest.fixture(params=HTTP_SERVERS)
def any_server(acme: Store, request: pytest.FixtureRequest) -> Iterator[str]:
    """One `baton serve` on each HTTP server it can run on: for what each server tells the app."""
    with api_replicas(acme.url, 1, {**NO_RECHECK, "BATON_HTTP_SERVER": request.param}) as urls:
        yield urls[0]


def test_a_waiting_pop_gets_a_task_pushed_to_the_same_server(server: str) -> None:
    with background() as pool:
        waiting = waiting_pop(pool, server)
        await_waiters(server, 1)
        pushed = httpx.post(f"{server}/queues/{QUEUE}/push", json={"priority": 1, "data": {"n": 1}}).json()
        task = answer(waiting)
    assert task["id"] == pushed["id"] and task["status"] == "dispatched"
    await_waiters(server, 0)


def test_a_task_queued_by_another_process_wakes_a_waiting_pop(acme: Store) -> None:
    """PostgreSQL: the insert's NOTIFY wakes the waiter; SQLite: the server sees the file change."""
    env = NO_RECHECK if acme.is_postgresql else QUICK_RECHECK
    with api_replicas(acme.url, 1, env) as urls, background() as pool:
        waiting = waiting_pop(pool, urls[0], "/schedulers/boefje/pop")  # by type, OpenKAT's dialect
        await_waiters(urls[0], 1)
        pushed = push(acme, QUEUE, data={"n": 1})  # this test process: another writer than the server
        results = answer(waiting)["results"]
    assert [task["id"] for task in results] == [str(pushed.task["id"])]


def test_a_task_handed_back_by_another_process_wakes_a_waiting_pop(acme: Store) -> None:
    env = NO_RECHECK if acme.is_postgresql else QUICK_RECHECK
    pushed = push(acme, QUEUE, data={"n": 1})
    assert pop(acme, QUEUE)[0]["id"] == pushed.task["id"]
    with api_replicas(acme.url, 1, env) as urls, background() as pool:
        waiting = waiting_pop(pool, urls[0])
        await_waiters(urls[0], 1)
        finish(acme, pushed.task["id"], TaskStatus.QUEUED)
        task = answer(waiting)
    assert task["id"] == str(pushed.task["id"]) and task["status"] == "dispatched"


def test_a_finished_task_freeing_an_organisations_cap_reaches_a_waiting_pop(store: Store) -> None:
    """No notification says a cap freed up: waiting pops of a type look again every recheck interval."""
    add_organisation(store, "capped", maxsize=0, max_in_flight=1)
    first, second = push(store, "boefje-capped", data={"n": 1}), push(store, "boefje-capped", data={"n": 2})
    assert pop(store, task_type="boefje")[0]["id"] == first.task["id"]
    assert pop(store, task_type="boefje", caps=True) == []  # the cap holds the second back
    with api_replicas(store.url, 1, QUICK_RECHECK) as urls, background() as pool:
        waiting = waiting_pop(pool, urls[0], "/schedulers/boefje/pop")
        await_waiters(urls[0], 1)
        finish(store, first.task["id"])
        results = answer(waiting)["results"]
    assert [task["id"] for task in results] == [str(second.task["id"])]


def test_a_wait_that_runs_out_gets_the_empty_answer(server: str) -> None:
    assert httpx.post(f"{server}/queues/{QUEUE}/pop", params={"wait": 0.2}).json() is None
    assert httpx.post(f"{server}/schedulers/boefje/pop", params={"wait": 0.2, "limit": 5}).json() == {"results": []}
    assert waiters(server) == 0


def test_a_task_queued_already_is_handed_out_at_once(server: str) -> None:
    pushed = httpx.post(f"{server}/queues/{QUEUE}/push", json={"priority": 1, "data": {}}).json()
    assert httpx.post(f"{server}/queues/{QUEUE}/pop", params={"wait": LONG}).json()["id"] == pushed["id"]


def test_two_waiters_and_one_push_hand_the_task_out_once(server: str) -> None:
    with background() as pool:
        first, second = waiting_pop(pool, server), waiting_pop(pool, server, "/schedulers/boefje/pop")
        await_waiters(server, 2)
        one = httpx.post(f"{server}/queues/{QUEUE}/push", json={"priority": 1, "data": {"n": 1}}).json()
        assert wait_until(lambda: first.done() or second.done(), timeout=SETTLE)
        await_waiters(server, 1)
        assert not (first.done() and second.done())  # the other still waits: it did not get the task too
        other = httpx.post(f"{server}/queues/{QUEUE}/push", json={"priority": 1, "data": {"n": 2}}).json()
        got = [answer(first)["id"], *(task["id"] for task in answer(second)["results"])]
    assert sorted(got) == sorted([one["id"], other["id"]])


def test_two_replicas_each_waiting_hand_one_task_out_once(pg_store: Store) -> None:
    add_organisation(pg_store, "acme", maxsize=0)
    with api_replicas(pg_store.url, 2, NO_RECHECK) as urls, background() as pool:
        first, second = waiting_pop(pool, urls[0]), waiting_pop(pool, urls[1])
        await_waiters(urls[0], 1)
        await_waiters(urls[1], 1)
        one = push(pg_store, QUEUE, data={"n": 1})
        assert wait_until(lambda: first.done() or second.done(), timeout=SETTLE)
        assert not (first.done() and second.done())
        other = push(pg_store, QUEUE, data={"n": 2})
        got = sorted([answer(first)["id"], answer(second)["id"]])
    assert got == sorted([str(one.task["id"]), str(other.task["id"])])


def test_waiters_beyond_the_limit_get_429_unless_a_task_is_queued(acme: Store) -> None:
    with api_replicas(acme.url, 1, {**NO_RECHECK, "BATON_POP_MAX_WAITERS": "1"}) as urls, background() as pool:
        url = urls[0]
        holding = waiting_pop(pool, url)
        await_waiters(url, 1)
        refused = httpx.post(f"{url}/queues/normalizer-acme/pop", params={"wait": LONG})
        assert refused.status_code == 429
        assert "BATON_POP_MAX_WAITERS" in refused.json()["message"] and "1 waiting" in refused.json()["message"]
        plain = httpx.post(f"{url}/queues/normalizer-acme/pop")  # no wait: no waiter, no limit
        assert plain.status_code == 200 and plain.json() is None
        queued = push(acme, "normalizer-acme", data={"n": 1})
        taken = httpx.post(f"{url}/queues/normalizer-acme/pop", params={"wait": LONG})
        assert taken.status_code == 200 and taken.json()["id"] == str(queued.task["id"])
        assert not holding.done()
        pushed = httpx.post(f"{url}/queues/{QUEUE}/push", json={"priority": 1, "data": {"n": 2}}).json()
        assert answer(holding)["id"] == pushed["id"]


@pytest.mark.parametrize("path", [f"/queues/{QUEUE}/pop", "/schedulers/boefje/pop"], ids=["baton", "openkat"])
def test_a_client_that_hangs_up_releases_its_waiter(any_server: str, acme: Store, path: str) -> None:
    """The server tells the app of the hang-up (ASGI's `http.disconnect`), and the pop stops waiting."""
    server = any_server
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(f"POST {path}?wait={LONG} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        await_waiters(server, 1)
    await_waiters(server, 0)
    pushed = push(acme, QUEUE, data={"n": 1})
    assert pop(acme, QUEUE)[0]["id"] == pushed.task["id"]  # nobody took it for the client that left


def test_waiting_pops_survive_a_lost_listen_connection(pg_store: Store) -> None:
    """The LISTEN connection is killed: waiters look for themselves until it is back, then are woken."""
    add_organisation(pg_store, "acme", maxsize=0)
    env = {**NO_RECHECK, "BATON_POP_RECHECK_SECONDS": "0.2"}
    with api_replicas(pg_store.url, 1, env) as urls, background() as pool:
        waiting = waiting_pop(pool, urls[0])
        await_waiters(urls[0], 1)
        assert wait_until(lambda: listening(pg_store) == 1, timeout=SETTLE)
        with psycopg.connect(libpq_conninfo(pg_store.url), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND datname = current_database()",
                (APPLICATION_NAME,),
            ).fetchone()
        assert killed == (1,)
        pushed = push(pg_store, QUEUE, data={"n": 1})
        assert answer(waiting)["id"] == str(pushed.task["id"])


def listening(store: Store) -> int:
    """The LISTEN connections of API processes on the test's database."""
    with psycopg.connect(libpq_conninfo(store.url), autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchone()
    return int(found[0]) if found else 0


def test_a_server_listens_only_while_pops_wait(pg_store: Store) -> None:
    """Without waiters no notification reaches the API process: pushes then cost it nothing extra."""
    add_organisation(pg_store, "acme", maxsize=0)
    env = {**NO_RECHECK, "BATON_POP_LISTEN_CHECK_SECONDS": "0.5"}  # idle close after two checks: 1 s, not 20
    with api_replicas(pg_store.url, 1, env) as urls, background() as pool:
        httpx.post(f"{urls[0]}/queues/{QUEUE}/pop").raise_for_status()
        assert listening(pg_store) == 0
        waiting = waiting_pop(pool, urls[0])
        await_waiters(urls[0], 1)
        assert wait_until(lambda: listening(pg_store) == 1, timeout=SETTLE)
        push(pg_store, QUEUE, data={"n": 1})
        assert answer(waiting)["status"] == "dispatched"
        assert wait_until(lambda: listening(pg_store) == 0, timeout=SETTLE)  # closed when idle


@pytest.mark.parametrize("http_server", HTTP_SERVERS)
def test_a_stopping_server_answers_its_waiting_pops_at_once(acme: Store, http_server: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        **NO_RECHECK,
        "BATON_DATABASE_URL": acme.url,
        "BATON_LOG_LEVEL": "warning",
        "BATON_HTTP_SERVER": http_server,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _ready(url), timeout=SETTLE), "baton serve did not come up"
        with background() as pool:
            waiting = waiting_pop(pool, url)
            await_waiters(url, 1)
            process.send_signal(signal.SIGTERM)
            assert answer(waiting) is None
        output, _ = process.communicate(timeout=SETTLE)  # LONG (120 s) would be the wait it did not hold
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode in (0, -signal.SIGTERM), output.decode()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("wait", ["-1", "abc", "nan", "inf", "30.5", "31"])
@pytest.mark.parametrize("path", [f"/queues/{QUEUE}/pop", "/schedulers/boefje/pop"])
def test_a_bad_wait_is_refused_naming_it(client: TestClient, acme: Store, path: str, wait: str) -> None:
    response = client.post(path, params={"wait": wait})
    assert response.status_code == 422, response.text
    assert response.json()["message"].startswith("wait: ")


def test_wait_zero_is_a_plain_pop(client: TestClient, acme: Store) -> None:
    assert client.post(f"/queues/{QUEUE}/pop", params={"wait": 0}).json() is None
    push(acme, QUEUE, data={})
    assert client.post(f"/queues/{QUEUE}/pop", params={"wait": "0"}).json()["status"] == "dispatched"


def test_the_wait_parameter_is_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/queues/{queue_id}/pop", "/schedulers/{scheduler}/pop"):
        (wait,) = [p for p in paths[path]["post"]["parameters"] if p["name"] == "wait"]
        assert "BATON_POP_MAX_WAIT_SECONDS" in wait["description"] and wait["in"] == "query"
        assert wait["schema"]["minimum"] == 0 and wait["schema"]["maximum"] == 30  # the setting's default
        assert "429" in paths[path]["post"]["responses"]


def test_the_sqlite_watcher_sees_only_real_changes(tmp_path: Any) -> None:
    """Between two looks the counter moves only when another connection committed (and reading it
    works: a watcher that could not read would wake every waiter at every interval)."""
    store = Store(f"sqlite:///{tmp_path / 'watched.db'}")
    store.migrate()
    add_organisation(store, "acme")
    watcher = ChangeWatcher(store, interval=1.0)
    try:
        first = watcher._data_version()
        assert first is not None and watcher._data_version() == first
        push(store, "boefje-acme")
        after_commit = watcher._data_version()
        assert after_commit is not None and after_commit != first
        assert watcher._data_version() == after_commit
    finally:
        watcher._forget_connection()
        store.dispose()
