"""What OpenKAT does to Baton during a soak run, as its own services and clients do it:

- Octopoes (`Octopoes`): new objects at a steady rate, each stored in the Octopoes stand-in, then a
  scan-profile message on `scan_profile_mutations`;
- the boefje and normalizer runners (`Runner`): pop one task (`/schedulers/{type}/pop`), without
  waiting after a task and with a long-poll after an empty answer; PATCH `running`, work a moment,
  PATCH `completed` (or `failed`, one in twenty); a boefje's result goes to Bytes (its BoefjeMeta)
  and Bytes' message `raw_file_received` follows, for the normalizers (an `error/boefje` file for a
  failed boefje: no normalizer reads it);
- rocky (`Rocky`): task and schedule lists, statistics and one task, as its pages read them, and a
  manual "run now" of a boefje now and then (`/schedulers/boefje/push`, priority 1);
- rocky again (`Backfills`): a boefje enabled for one more organisation now and then, through
  KATalogus' API (Baton's next poll sees it and plans the organisation's existing objects).

Each client retries through the faults as OpenKAT's do (another replica, a moment later), and
records what it did: latencies (`Recorder`), the tasks it held (`Ledger`), what was published and
when (`Published`), so that the end of the run can account for every task.
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from baton.ingest.rabbitmq import Publisher
from bench.soak.plan import BACKFILL_BOEFJE, BOEFJES, OBJECT_LEVEL, Plan
from bench.soak.standins import BYTES_USER, Outside

FAILED_SHARE = 0.05  # runners report one task in twenty failed
WORK_SECONDS = (0.02, 0.2)  # a task's run
GIVE_UP_AFTER = 600.0  # a client call retried this long through faults is a failure of the run


def utc_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Recorder:
    """Every timed call (kind, when, seconds) and every failed one (kind: what the client saw)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.latencies: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.errors: list[tuple[float, str]] = []

    def latency(self, kind: str, seconds: float) -> None:
        with self._lock:
            self.latencies[kind].append((self.clock(), seconds))

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors.append((self.clock(), kind))

    def between(self, start: float, end: float) -> tuple[dict[str, list[float]], Counter[str]]:
        with self._lock:
            latencies = {
                kind: [seconds for at, seconds in values if start <= at < end]
                for kind, values in self.latencies.items()
            }
            errors = Counter(kind for at, kind in self.errors if start <= at < end)
        return latencies, errors


@dataclass
class Published:
    """What OpenKAT's side sent, with the wall-clock time it was sent (epoch seconds)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    mutations: dict[tuple[str, str], float] = field(default_factory=dict)  # (organisation, object) → sent
    raw_files: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # raw id → (org, mime, sent)
    manual_runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # task id → (org, object)
    manual_refused: int = 0  # 409: the same job queued already
    backfills: list[tuple[str, str, float]] = field(default_factory=list)  # (org, boefje, enabled at)

    def fed_objects(self, older_than: float) -> list[tuple[str, str]]:
        with self.lock:
            return [key for key, sent in self.mutations.items() if sent < older_than]


@dataclass
class Ledger:
    """The tasks the runners held: who popped each (twice would be a task handed out twice), how each
    ended, and every PATCH Baton refused."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    popped: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    finished: dict[str, str] = field(default_factory=dict)
    refused: list[dict[str, Any]] = field(default_factory=list)
    holding: set[str] = field(default_factory=set)

    def pop(self, task_id: str, runner: str) -> None:
        with self.lock:
            self.popped[task_id].append(runner)
            self.holding.add(task_id)

    def finish(self, task_id: str, status: str | None) -> None:
        with self.lock:
            self.holding.discard(task_id)
            if status is not None:
                self.finished[task_id] = status

    def refuse(self, task_id: str, wanted: str, found: str | None, answer: str) -> None:
        with self.lock:
            self.refused.append({"task": task_id, "wanted": wanted, "found": found, "answer": answer[:300]})


class Api:
    """Calls to whichever API replica is up: a connection error or a 5xx moves the call to the next
    replica after a moment, until GIVE_UP_AFTER. One keep-alive client per replica per caller."""

    def __init__(self, urls: Callable[[], list[str]], recorder: Recorder, name: str, offset: int = 0) -> None:
        self.urls = urls
        self.recorder = recorder
        self.name = name
        self.offset = offset
        self._clients: dict[str, httpx.Client] = {}

    def _client(self, url: str, timeout: float) -> httpx.Client:
        if url not in self._clients:
            self._clients[url] = httpx.Client(base_url=url, timeout=timeout)
        return self._clients[url]

    def call(
        self, kind: str, method: str, path: str, timeout: float = 30.0, **options: Any
    ) -> tuple[httpx.Response, float]:
        """The answer (below 500) and the seconds it took; errors on the way are recorded by kind."""
        deadline = time.monotonic() + GIVE_UP_AFTER
        for attempt in itertools.count():
            urls = self.urls()
            url = urls[(self.offset + attempt) % len(urls)] if urls else ""
            try:
                if not url:
                    raise httpx.ConnectError("no API replica is up")
                started = time.perf_counter()
                answer = self._client(url, timeout).request(method, path, timeout=timeout, **options)
                took = time.perf_counter() - started
                if answer.status_code < 500:
                    return answer, took
                self.recorder.error(f"{kind}: HTTP {answer.status_code}")
            except httpx.HTTPError as exc:
                self.recorder.error(f"{kind}: {type(exc).__name__}")
                self._clients.pop(url, None)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: {method} {path} failed for {GIVE_UP_AFTER:.0f} s")
            time.sleep(min(2.0, 0.1 * (attempt + 1)))
        raise AssertionError("unreachable")

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


class Outbox:
    """One publisher for every OpenKAT message of the run (pika's connections are not thread-safe),
    confirmed and persistent; through a broker restart it waits and publishes again."""

    def __init__(self, amqp_url: str) -> None:
        self._publisher = Publisher(amqp_url, attempts=1000)
        self._queue: queue.Queue[tuple[str, dict[str, Any], Callable[[], None]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="soak-outbox", daemon=True)
        self.failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def send(self, queue_name: str, payload: dict[str, Any], sent: Callable[[], None]) -> None:
        """Publish later, in order; `sent` is called just before the message goes out."""
        self._queue.put((queue_name, payload, sent))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            queue_name, payload, sent = item
            try:
                sent()
                self._publisher.publish(queue_name, payload)
            except BaseException as exc:  # noted; the run's checks then fail with it
                self.failure = exc
            finally:
                self._queue.task_done()

    @property
    def idle(self) -> bool:
        """Everything handed to the outbox has been published."""
        return self._queue.unfinished_tasks == 0

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(GIVE_UP_AFTER)
        self._publisher.close()


def mutation(organisation: str, reference: str) -> dict[str, Any]:
    """A scan-profile message as Octopoes publishes it on `scan_profile_mutations`."""
    profile = {"scan_profile_type": "declared", "reference": reference, "level": OBJECT_LEVEL, "user_id": None}
    value = {"primary_key": reference, "object_type": reference.split("|", 1)[0], "scan_profile": profile}
    return {"operation": "create", "primary_key": reference, "value": value, "client_id": organisation}


def boefje_meta(task: dict[str, Any], started: str, ended: str) -> dict[str, Any]:
    data = task["data"]
    return {
        "id": task["id"],
        "started_at": started,
        "ended_at": ended,
        "boefje": {"id": data["boefje"]["id"], "version": data["boefje"].get("version")},
        "input_ooi": data.get("input_ooi"),
        "arguments": {},
        "organization": data["organization"],
        "runnable_hash": None,
        "environment": {},
    }


def raw_file(meta: dict[str, Any], mime: str) -> dict[str, Any]:
    """Bytes' message on `raw_file_received` for a boefje's result."""
    raw = {
        "id": str(uuid.uuid4()),
        "boefje_meta": meta,
        "mime_types": [{"value": mime}],
        "secure_hash": "sha512:soak",
        "signing_provider_url": None,
        "hash_retrieval_link": None,
    }
    return {"created_at": utc_now(), "organization": meta["organization"], "raw_data": raw}


class Bytes:
    """The runners' client of the Bytes stand-in: a boefje's BoefjeMeta, as the runner saves it."""

    def __init__(self, url: str) -> None:
        self._http = httpx.Client(base_url=url, timeout=30)
        self._lock = threading.Lock()
        self._token: str | None = None

    def save(self, meta: dict[str, Any]) -> None:
        with self._lock:
            for _ in range(2):
                if self._token is None:
                    form = {"username": BYTES_USER[0], "password": BYTES_USER[1]}
                    self._token = self._http.post("/token", data=form).raise_for_status().json()["access_token"]
                answer = self._http.post(
                    "/bytes/boefje_meta", json=meta, headers={"Authorization": f"Bearer {self._token}"}
                )
                if answer.status_code != 401:
                    answer.raise_for_status()
                    return
                self._token = None

    def close(self) -> None:
        self._http.close()


@dataclass
class Load:
    """What every client shares: the plan, the stop signals, and the records."""

    plan: Plan
    api_urls: Callable[[], list[str]]
    outside: Outside
    outbox: Outbox
    recorder: Recorder
    published: Published = field(default_factory=Published)
    ledger: Ledger = field(default_factory=Ledger)
    feeding: threading.Event = field(default_factory=threading.Event)  # set: Octopoes and rocky stop
    popping: threading.Event = field(default_factory=threading.Event)  # set: runners stop
    failures: list[str] = field(default_factory=list)


class Client(threading.Thread):
    def __init__(self, load: Load, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.load = load
        self.random = random.Random(name)

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # the run's checks fail with it
            self.load.failures.append(f"{self.name}: {exc!r}")

    def work(self) -> None:
        raise NotImplementedError

    def pace(self, per_second: float, stop: threading.Event) -> bool:
        """Wait a random gap averaging 1/per_second; False once `stop` is set."""
        return not stop.wait(self.random.expovariate(per_second))


class Runner(Client):
    def __init__(self, load: Load, kind: str, index: int, bytes_client: Bytes) -> None:
        super().__init__(load, f"{kind}-runner-{index}")
        self.kind = kind
        self.api = Api(load.api_urls, load.recorder, self.name, offset=index)
        self.bytes = bytes_client

    def work(self) -> None:
        got = True
        wait = self.load.plan.long_poll_seconds
        try:
            while not self.load.popping.is_set():
                params: dict[str, Any] = {"limit": 1} if got else {"limit": 1, "wait": wait}
                answer, took = self.api.call(
                    "pop", "POST", f"/schedulers/{self.kind}/pop", timeout=wait + 30, params=params
                )
                if got:  # a pop that may not wait: its time is the pop's own
                    self.load.recorder.latency("pop", took)
                if answer.status_code != 200:
                    self.load.recorder.error(f"pop: HTTP {answer.status_code}")
                    got = False
                    continue
                tasks = answer.json()["results"]
                got = bool(tasks)
                for task in tasks:
                    self.load.ledger.pop(task["id"], self.name)
                    self.run_task(task)
        finally:
            self.api.close()

    def run_task(self, task: dict[str, Any]) -> None:
        started = utc_now()
        if not self.patch(task["id"], "running"):
            self.load.ledger.finish(task["id"], None)
            return
        time.sleep(self.random.uniform(*WORK_SECONDS))
        outcome = "failed" if self.random.random() < FAILED_SHARE else "completed"
        if not self.patch(task["id"], outcome):
            self.load.ledger.finish(task["id"], None)
            return
        self.load.ledger.finish(task["id"], outcome)
        if self.kind == "boefje":
            self.report(task, started, outcome)

    def patch(self, task_id: str, status: str) -> bool:
        """PATCH the status; a 409 after a retry is fine when the task has that status already (the first
        attempt's answer was lost). Any other refusal is recorded: it should not happen."""
        answer, took = self.api.call("patch", "PATCH", f"/tasks/{task_id}", json={"status": status})
        self.load.recorder.latency("patch", took)
        if answer.status_code == 200:
            return True
        found = None
        if answer.status_code == 409:
            current, _ = self.api.call("read", "GET", f"/tasks/{task_id}")
            found = current.json().get("status") if current.status_code == 200 else None
            if found == status:
                return True
        self.load.ledger.refuse(task_id, status, found, f"{answer.status_code} {answer.text}")
        return False

    def report(self, task: dict[str, Any], started: str, outcome: str) -> None:
        """What a boefje runner and Bytes do with a result: the BoefjeMeta saved, the raw file announced."""
        meta = boefje_meta(task, started, utc_now())
        self.bytes.save(meta)
        boefje = task["data"]["boefje"]["id"]
        mime = f"boefje/{boefje}" if outcome == "completed" else "error/boefje"
        message = raw_file(meta, mime)
        raw_id = message["raw_data"]["id"]
        published = self.load.published

        def sent() -> None:
            with published.lock:
                published.raw_files[raw_id] = (task["data"]["organization"], mime, time.time())

        self.load.outbox.send("raw_file_received", message, sent)


class Octopoes(Client):
    """New objects at the plan's rate, spread over the organisations (and their twins)."""

    def __init__(self, load: Load, organisations: list[str], twins: dict[str, str]) -> None:
        super().__init__(load, "octopoes")
        self.organisations = organisations
        self.twins = twins

    def work(self) -> None:
        published = self.load.published
        for n in itertools.count():
            if not self.pace(self.load.plan.mutations_per_second, self.load.feeding):
                return
            organisation = self.random.choice(self.organisations)
            reference = f"Hostname|internet|n{n}.{organisation}.example"
            held = [{"organisation": organisation, "reference": reference}]
            if organisation in self.twins:  # its twin holds the object too: the boefje's task gets a twin
                held.append({"organisation": self.twins[organisation], "reference": reference})
            self.load.outside.add_objects(held)

            def sent(key: tuple[str, str] = (organisation, reference)) -> None:
                with published.lock:
                    published.mutations[key] = time.time()

            self.load.outbox.send("scan_profile_mutations", mutation(organisation, reference), sent)


READS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("/tasks", {"scheduler_id": "boefje", "limit": 10}),
    ("/tasks", {"status": "completed", "limit": 10}),
    ("/tasks/stats", {}),
    ("/schedules", {"scheduler_id": "boefje", "limit": 10}),
)


class Rocky(Client):
    """rocky's pages (a list, statistics, schedules, one task) and its manual runs."""

    def __init__(self, load: Load, organisations: list[str]) -> None:
        super().__init__(load, "rocky")
        self.organisations = organisations
        self.api = Api(load.api_urls, load.recorder, self.name)

    def work(self) -> None:
        plan = self.load.plan
        rate = plan.reads_per_second + plan.manual_runs_per_second
        try:
            for n in itertools.count():
                if not self.pace(rate, self.load.feeding):
                    return
                if self.random.random() < plan.manual_runs_per_second / rate:
                    self.manual_run()
                else:
                    self.read(n)
        finally:
            self.api.close()

    def read(self, n: int) -> None:
        organisation = self.random.choice(self.organisations)
        path, params = READS[n % len(READS)]
        key = "organisation_id" if path == "/tasks/stats" else "organisation"
        answer, took = self.api.call("read", "GET", path, params={**params, key: organisation})
        self.load.recorder.latency("read", took)
        if answer.status_code != 200:
            self.load.recorder.error(f"read: HTTP {answer.status_code}")
            return
        if path == "/tasks" and answer.json()["results"]:  # rocky opens a task of the list
            task_id = answer.json()["results"][0]["id"]
            _task, took = self.api.call("read", "GET", f"/tasks/{task_id}")
            self.load.recorder.latency("read", took)

    def manual_run(self) -> None:
        published = self.load.published
        candidates = published.fed_objects(time.time() - 5)
        if not candidates:
            return
        organisation, reference = self.random.choice(candidates)
        boefje = BOEFJES[0]
        job = {
            "type": "boefje",
            "id": None,
            "boefje": {"id": boefje.id, "name": boefje.id, "version": None, "oci_image": None},
            "input_ooi": reference,
            "organization": organisation,
            "deduplication_key": None,
        }
        body = {"scheduler_id": "boefje", "organisation": organisation, "priority": 1, "data": job}
        answer, took = self.api.call("push", "POST", "/schedulers/boefje/push", json=body)
        self.load.recorder.latency("push", took)
        with published.lock:
            if answer.status_code == 201:
                published.manual_runs[answer.json()["id"]] = (organisation, reference)
            elif answer.status_code == 409:
                published.manual_refused += 1
            else:
                self.load.recorder.error(f"push: HTTP {answer.status_code}")


class Backfills(Client):
    """The backfill boefje enabled for one more organisation, `count` times spread over the run."""

    def __init__(self, load: Load, organisations: list[str], count: int, seconds: float) -> None:
        super().__init__(load, "backfills")
        self.organisations = organisations
        self.count = count
        self.seconds = seconds

    def work(self) -> None:
        gap = self.seconds / (self.count + 1)
        for organisation in self.organisations[: self.count]:
            if self.load.feeding.wait(gap):
                return
            self.load.outside.enable(organisation, BACKFILL_BOEFJE)
            with self.load.published.lock:
                self.load.published.backfills.append((organisation, BACKFILL_BOEFJE, time.time()))
