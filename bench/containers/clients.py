"""What runs on the host against the containers: job-runner clients and the RabbitMQ publisher,
recording everything they see in a Ledger."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.containers.stack import Stack, log

OBJECT_TYPE = "ReplicaObject"


@dataclass
class Ledger:
    """Everything the clients and the publisher saw, with wall-clock times (containers share the clock)."""

    pops: list[tuple[float, int, str]] = field(default_factory=list)  # (time, client, task id)
    completed: set[str] = field(default_factory=set)
    holds: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    pop_ok: list[float] = field(default_factory=list)  # every pop request answered 200
    errors: list[tuple[float, str]] = field(default_factory=list)  # connection errors and 5xx
    published: dict[tuple[str, str], float] = field(default_factory=dict)  # (org, object) -> confirmed at
    publish_seconds: list[tuple[float, float]] = field(default_factory=list)  # (started, seconds)
    lock: threading.Lock = field(default_factory=threading.Lock)


class JobRunner(threading.Thread):
    """A job runner outside the containers: pop one task (OpenKAT's cross-organisation pop), PATCH it
    completed; on a dead replica or a 5xx it tries the next replica."""

    def __init__(self, stack: Stack, ledger: Ledger, stop: threading.Event, index: int) -> None:
        super().__init__(daemon=True, name=f"client-{index}")
        self.stack = stack
        self.ledger = ledger
        self.stop_event = stop
        self.index = index
        self.clients: dict[str, httpx.Client] = {}

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        for attempt in itertools.count():
            if self.stop_event.is_set() and attempt > 0:
                return None
            urls = sorted(self.stack.api.values())
            url = urls[(self.index + attempt) % len(urls)]
            client = self.clients.get(url)
            if client is None:
                client = self.clients[url] = httpx.Client(base_url=url, headers=self.stack.headers, timeout=10)
            try:
                response = client.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                self._error(f"{url} {type(exc).__name__}")
                time.sleep(0.2)
                continue
            if response.status_code >= 500:
                self._error(f"{url} {response.status_code}")
                time.sleep(0.2)
                continue
            return response
        return None

    def _error(self, what: str) -> None:
        with self.ledger.lock:
            self.ledger.errors.append((time.time(), what))

    def run(self) -> None:
        while not self.stop_event.is_set():
            response = self._call("POST", "/schedulers/boefje/pop", params={"limit": 1})
            if response is None:
                continue
            now = time.time()
            if response.status_code != 200:
                self._error(f"pop answered {response.status_code}")
                time.sleep(0.2)
                continue
            tasks = response.json()["results"]
            with self.ledger.lock:
                self.ledger.pop_ok.append(now)
                self.ledger.pops.extend((now, self.index, task["id"]) for task in tasks)
            if not tasks:
                time.sleep(0.2)
                continue
            for task in tasks:
                done = self._call("PATCH", f"/tasks/{task['id']}", json={"status": "completed"})
                if done is not None and (done.status_code == 200 or self._is_completed(task["id"])):
                    with self.ledger.lock:
                        self.ledger.completed.add(task["id"])
                        self.ledger.holds[task["id"]].append((now, time.time()))

    def _is_completed(self, task_id: str) -> bool:
        """After a 409 (the PATCH's first answer was lost with its replica): did it complete?"""
        response = self._call("GET", f"/tasks/{task_id}")
        return response is not None and response.status_code == 200 and response.json()["status"] == "completed"


class AmqpPublisher:
    """Confirmed, persistent publishing in the wire format Baton documents (docs/concepts/schedulers.md,
    "Events from RabbitMQ"): durable queues, JSON bodies. Reconnects and retries through a broker
    restart (0.1 s, then every 0.2 s: the time an event takes through a restart is Baton's, not this
    publisher's back-off); a publish that returned was confirmed by the broker. Deliberately not
    Baton's own module: the harness drives the containers from outside, like any other publisher."""

    def __init__(self, url: str, attempts: int = 600) -> None:
        self.url = url
        self.attempts = attempts
        self.connection: Any = None
        self.channel: Any = None
        self.declared: set[str] = set()

    def publish(self, queue: str, payload: dict[str, Any]) -> None:
        import pika

        delay = 0.1
        for attempt in range(self.attempts):
            try:
                if self.channel is None or not self.channel.is_open:
                    self.close()
                    self.connection = pika.BlockingConnection(pika.URLParameters(self.url))
                    self.channel = self.connection.channel()
                    self.channel.confirm_delivery()
                    self.declared.clear()
                if queue not in self.declared:
                    self.channel.queue_declare(queue=queue, durable=True)
                    self.declared.add(queue)
                self.channel.basic_publish(
                    exchange="",
                    routing_key=queue,
                    body=json.dumps(payload).encode(),
                    properties=pika.BasicProperties(delivery_mode=2, content_type="application/json"),
                    mandatory=True,
                )
                return
            except (pika.exceptions.AMQPError, OSError, ValueError):
                self.channel = None
                if attempt == self.attempts - 1:
                    raise
                time.sleep(delay)
                delay = min(0.2, delay * 2)

    def close(self) -> None:
        with suppress(Exception):
            if self.connection is not None and self.connection.is_open:
                self.connection.close()
        self.connection = self.channel = None


class EventPublisher(threading.Thread):
    """Publishes one scan-profile mutation per object to `{org}__scan_profile_mutations`, confirmed
    and persistent; records when each was confirmed and how long each publish took (it retries
    through a broker restart). Runs at `rate` until stopped, so events flow through every kill and
    restart."""

    def __init__(self, stack: Stack, ledger: Ledger, organisations: list[str], rate: float) -> None:
        super().__init__(daemon=True, name="publisher")
        self.stack = stack
        self.ledger = ledger
        self.organisations = organisations
        self.rate = rate
        self.failed = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        publisher = AmqpPublisher(self.stack.amqp_url)
        for n in itertools.count():
            if self.stop_event.is_set():
                break
            org = self.organisations[n % len(self.organisations)]
            key = f"{OBJECT_TYPE}|obj-{n}"
            body = {
                "type": "scan_profile_mutation",
                "operation": "create",
                "object": {"primary_key": key, "object_type": OBJECT_TYPE, "scan_level": 1},
            }
            started = time.time()
            try:
                publisher.publish(f"{org}__scan_profile_mutations", body)
            except Exception as exc:  # gave up after its retries: not counted as an event in
                self.failed += 1
                log(f"publish of {key} failed: {exc!r}")
                continue
            confirmed = time.time()
            with self.ledger.lock:
                self.ledger.published[(org, key)] = confirmed
                self.ledger.publish_seconds.append((started, confirmed - started))
            time.sleep(max(0.0, 1 / self.rate - (confirmed - started)))
        publisher.close()
