"""RabbitMQ (pika): organisation events for directors, per-organisation events for schedulers.

Queues (all durable, messages persistent, JSON bodies):
- `baton.organisations`: `{"type": "organisation.created", "organisation": {"id", "name"}}` and
  `{"type": "organisation.deleted", "organisation": {"id"}}`, consumed by every director.
- `{org}__scan_profile_mutations` and `{org}__raw_file_received` (OpenKAT's names), consumed by the
  organisation's boefje and normalizer schedulers; the bodies are the events of events.py.
- `baton.dead-letter`: malformed or unprocessable messages, with the reason in the `x-baton-error`
  header and the source queue in `x-baton-queue`. Never dropped silently.

Delivery is at-least-once with manual acks sent only after the database commit the message caused;
processing is idempotent, so a redelivery after a crash or a broker restart creates no duplicates.

A broker outage is the process's, not each consumer's: every consumer reports its attempts to connect to
`BROKER` (core/outages.py), which logs one warning when the broker stops taking connections and one line
when it takes them again, however many schedulers' sources, routers and watchers the process runs. A
connection that breaks is not reported, only reopened: a broker that shuts down closes its connections
one by one, and a consumer whose connection was still open would otherwise end the outage the others
just began (a worker of 200 organisations logged 40 outages for one restart); the reconnect tells.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic, BasicProperties
from pydantic import ValidationError

from baton.core.backoff import RECONNECT, fresh
from baton.core.diagnosis import reason
from baton.core.errors import ConfigurationError, DatabaseUnavailableError, UnprocessableError
from baton.core.logging import get_logger
from baton.core.model import SchedulerType
from baton.core.outages import OutageTracker
from baton.core.supervision import BackgroundService, retry_until_stopped
from baton.ingest.events import (
    OrganisationCreated,
    OrganisationDeleted,
    RawFileReceived,
    ScanProfileMutation,
    consumer_of,
    enqueue_event,
    event_organisation,
    parse_event,
    target_scheduler,
)
from baton.storage.control.organisations import adopt_organisation
from baton.storage.engine import Session, Store
from baton.storage.errors import DATABASE

log = get_logger("baton.messaging")

ORGANISATIONS_QUEUE = "baton.organisations"
DEAD_LETTER_QUEUE = "baton.dead-letter"
EVENT_QUEUE_SUFFIX = {
    SchedulerType.BOEFJE: "scan_profile_mutations",
    SchedulerType.NORMALIZER: "raw_file_received",
}
# pika raises ValueError ("Timeout closed before call") from a consume on a connection the broker dropped.
AMQP_ERRORS = (pika.exceptions.AMQPError, OSError, ValueError)
# An event the router could not put in an inbox goes back to its queue; the router tries again after
# this long at most (sooner when the database outage that stopped it ends).
ROUTE_RETRY_SECONDS = 1.0


BROKER = OutageTracker("broker", log)


@contextmanager
def broker_attempt() -> Iterator[None]:
    """One attempt to connect to the broker (and set the channel up), reported to the process's `BROKER`."""
    seen = BROKER.mark
    try:
        yield
    except AMQP_ERRORS as exc:
        BROKER.failed(seen, reason(exc))
        raise
    BROKER.succeeded(seen)


def event_queue(organisation: str, scheduler_type: SchedulerType) -> str:
    return f"{organisation}__{EVENT_QUEUE_SUFFIX[scheduler_type]}"


def connect(url: str) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    params.heartbeat = 30
    params.blocked_connection_timeout = 60
    params.connection_attempts = 1
    return pika.BlockingConnection(params)


def close_quietly(connection: pika.BlockingConnection | None) -> None:
    """Close a connection that may already be broken (the broker went away): errors are expected."""
    try:
        if connection is not None and connection.is_open:
            connection.close()
    except AMQP_ERRORS:
        pass


def amqp_error(exc: BaseException, url: str) -> ConfigurationError:
    """One line: which broker could not be reached, why, and which setting to check."""
    try:
        params = pika.URLParameters(url)
        where = f"{params.host}:{params.port}"
    except Exception:
        where = "the configured address"
    return ConfigurationError(f"cannot reach RabbitMQ at {where} ({reason(exc)}); check BATON_AMQP_URL")


def declare_queue(channel: BlockingChannel, name: str) -> None:
    channel.queue_declare(queue=name, durable=True)


def dead_letter(channel: BlockingChannel, body: bytes, source_queue: str, reason: str) -> None:
    """Keep a message we cannot process, with why, in the dead-letter queue (confirmed publish)."""
    declare_queue(channel, DEAD_LETTER_QUEUE)
    channel.basic_publish(
        exchange="",
        routing_key=DEAD_LETTER_QUEUE,
        body=body,
        properties=BasicProperties(
            delivery_mode=2,
            content_type="application/json",
            headers={"x-baton-error": reason[:4000], "x-baton-queue": source_queue},
        ),
        mandatory=True,
    )
    log.warning("message dead-lettered", queue=source_queue, reason=reason[:500])


# -- publishing ---------------------------------------------------------------------------------------


class Publisher:
    """Confirmed, persistent publishing; reconnects and retries on a broker restart (by default for
    about a minute: attempts at most 2 s apart)."""

    def __init__(self, url: str, attempts: int = 30) -> None:
        self.url = url
        self.attempts = attempts
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._declared: set[str] = set()

    def _ensure_channel(self) -> BlockingChannel:
        if self._channel is None or not self._channel.is_open:
            self._connection = connect(self.url)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
            self._declared.clear()
        return self._channel

    def publish(self, queue_name: str, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        backoff = fresh(RECONNECT)
        for attempt in range(self.attempts):
            try:
                channel = self._ensure_channel()
                if queue_name not in self._declared:
                    declare_queue(channel, queue_name)
                    self._declared.add(queue_name)
                channel.basic_publish(
                    exchange="",
                    routing_key=queue_name,
                    body=body,
                    properties=BasicProperties(delivery_mode=2, content_type="application/json"),
                    mandatory=True,
                )
                return
            except AMQP_ERRORS as exc:
                self._reset()
                if attempt == self.attempts - 1:
                    raise
                if not backoff.failures_seen:  # once per outage, not once per attempt
                    log.warning("publish failed; retrying", error=repr(exc))
                time.sleep(backoff.next())

    def publish_event(self, organisation: str, event: ScanProfileMutation | RawFileReceived) -> None:
        self.publish(event_queue(organisation, consumer_of(event)), event.model_dump(mode="json"))

    def publish_organisation(self, event: OrganisationCreated | OrganisationDeleted) -> None:
        self.publish(ORGANISATIONS_QUEUE, event.model_dump(mode="json", exclude_none=True))

    def _reset(self) -> None:
        close_quietly(self._connection)
        self._connection = None
        self._channel = None

    def close(self) -> None:
        self._reset()


# -- consuming: a scheduler's event source --------------------------------------------------------------


class ReceivedBatch:
    """The deliveries of one `receive`, acked with one `multiple` ack once every one of them is
    settled. A nack goes at once, so when the multiple ack is sent the only unacked messages up to
    its tag are the batch's acked ones (earlier batches are settled; later messages have higher
    tags). A batch never fully settled is never acked: the broker redelivers it when the channel
    closes, which is safe (processing is idempotent)."""

    def __init__(self, channel: BlockingChannel) -> None:
        self.channel = channel
        self.unsettled = 0
        self.highest_acked = 0

    def add(self) -> None:
        self.unsettled += 1

    def ack(self, tag: int) -> None:
        self.highest_acked = max(self.highest_acked, tag)
        self._settled()

    def nack(self, tag: int) -> None:
        try:
            if self.channel.is_open:
                self.channel.basic_nack(tag, requeue=True)
        except AMQP_ERRORS:
            pass
        self._settled()

    def _settled(self) -> None:
        self.unsettled -= 1
        if self.unsettled > 0 or not self.highest_acked:
            return
        # A channel lost since receiving means the broker requeued the messages already; their
        # redelivery is idempotent, so there is nothing to do here.
        try:
            if self.channel.is_open:
                self.channel.basic_ack(self.highest_acked, multiple=True)
        except AMQP_ERRORS as exc:
            log.warning("ack failed; messages will be redelivered", error=repr(exc))


class AmqpDelivery:
    def __init__(self, batch: ReceivedBatch, queue_name: str, tag: int, body: bytes) -> None:
        self.batch = batch
        self.channel = batch.channel
        self.queue_name = queue_name
        self.tag = tag
        self.body = body
        self.settled = False
        batch.add()
        try:
            decoded = json.loads(body)
            self.payload: dict[str, Any] = decoded if isinstance(decoded, dict) else {"_not_an_object": decoded}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.payload = {"_undecodable": str(exc)}

    def settle(self, session: Session) -> None:
        return None

    def ack(self) -> None:
        if not self.settled:
            self.settled = True
            self.batch.ack(self.tag)

    def nack(self) -> None:
        if not self.settled:
            self.settled = True
            self.batch.nack(self.tag)

    def reject(self, reason: str) -> None:
        dead_letter(self.channel, self.body, self.queue_name, reason)


class RabbitMQSource:
    """Pulls a scheduler's events from its RabbitMQ queue, prefetch-limited, reconnecting with backoff."""

    def __init__(self, url: str, queue_name: str, prefetch: int = 100, wait_seconds: float = 0.05) -> None:
        self.url = url
        self.queue_name = queue_name
        self.prefetch = prefetch
        self.wait_seconds = wait_seconds
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._messages: Iterator[tuple[Basic.Deliver | None, BasicProperties | None, bytes | None]] | None = None
        self._retry_at = 0.0
        self._backoff = fresh(RECONNECT)
        self._consumed = False  # said once: a reconnect after an outage says nothing (BROKER logs its end)

    def _open(self, batch_size: int) -> None:
        self._connection = connect(self.url)
        channel = self._connection.channel()
        channel.confirm_delivery()  # dead-letter publishes are confirmed
        # At least a batch in flight, or every receive would wait out `wait_seconds` short of one.
        channel.basic_qos(prefetch_count=max(self.prefetch, batch_size))
        declare_queue(channel, self.queue_name)
        self._channel = channel
        self._messages = channel.consume(self.queue_name, inactivity_timeout=self.wait_seconds)
        if not self._consumed:
            log.info("consuming", queue=self.queue_name)
            self._consumed = True
        self._backoff.reset()

    def receive(self, session: Session, limit: int) -> Sequence[AmqpDelivery]:
        if time.monotonic() < self._retry_at:
            return []
        try:
            if self._messages is None:
                with broker_attempt():
                    self._open(limit)
            assert self._channel is not None and self._messages is not None
            batch = ReceivedBatch(self._channel)
            deliveries: list[AmqpDelivery] = []
            while len(deliveries) < limit:
                method, _properties, body = next(self._messages)
                if method is None:
                    break
                deliveries.append(AmqpDelivery(batch, self.queue_name, method.delivery_tag, body or b""))
            return deliveries
        except AMQP_ERRORS:  # reopened after a backoff; a failed reopening is the process's BROKER's to log
            self._drop()
            self._retry_at = time.monotonic() + self._backoff.next()
            return []

    def _drop(self) -> None:
        close_quietly(self._connection)
        self._connection = None
        self._channel = None
        self._messages = None

    def close(self) -> None:
        try:
            if self._channel is not None and self._channel.is_open:
                self._channel.cancel()  # unacked messages go back to the queue
        except AMQP_ERRORS:
            pass
        self._drop()


# -- OpenKAT's own queues: routed into the schedulers' inboxes ---------------------------------------------

OPENKAT_QUEUES = ("scan_profile_mutations", "raw_file_received")


class OpenKatEventRouter(BackgroundService):
    """Consumes the queues OpenKAT's services publish to (`scan_profile_mutations` from Octopoes,
    `raw_file_received` from Bytes; one queue each for every organisation) and puts each message in
    the inbox of the scheduler it concerns, in one transaction, before acking it. Competing routers
    (one per director or worker) share the work; a redelivery after a crash is harmless (the
    schedulers' processing is idempotent). A malformed message, or one for an unknown organisation
    while BATON_AUTO_ORGANISATIONS is off, goes to the dead-letter queue."""

    thread_name = "openkat-event-router"

    def __init__(self, url: str, store: Store, auto_organisations: bool, maxsize: int, prefetch: int = 100) -> None:
        super().__init__()
        self.url = url
        self.store = store
        self.auto_organisations = auto_organisations
        self.maxsize = maxsize
        self.prefetch = prefetch
        self.routed = 0

    def run(self) -> None:
        retry_until_stopped(self._stop, self._consume, fresh(RECONNECT), AMQP_ERRORS, None)

    def _consume(self) -> None:
        with broker_attempt():
            connection = connect(self.url)
        try:
            with broker_attempt():
                channel = connection.channel()
                channel.confirm_delivery()
                channel.basic_qos(prefetch_count=self.prefetch)
                for name in OPENKAT_QUEUES:
                    declare_queue(channel, name)
                    channel.basic_consume(name, self._on_message(channel, name))
            log.info("routing OpenKAT events", queues=list(OPENKAT_QUEUES))
            while not self.stopping:
                connection.process_data_events(time_limit=0.5)
        finally:
            close_quietly(connection)

    def _on_message(self, channel: BlockingChannel, queue_name: str) -> Any:
        def handle(_channel: Any, method: Basic.Deliver, _properties: BasicProperties, body: bytes) -> None:
            self.route(channel, queue_name, method.delivery_tag, body)

        return handle

    def route(self, channel: BlockingChannel, queue_name: str, tag: int, body: bytes) -> None:
        try:
            event = parse_event(json.loads(body))
            organisation = event_organisation(event)
            if organisation is None:
                raise ValueError("the message names no organisation (client_id or organization)")
        except (ValueError, ValidationError) as exc:  # json and pydantic errors are ValueErrors too
            dead_letter(channel, body, queue_name, f"malformed: {exc}")
            channel.basic_ack(tag)
            return
        try:
            with self.store.session() as session:
                scheduler_id = target_scheduler(event, organisation)
                if not adopt_organisation(session, organisation, auto=self.auto_organisations, maxsize=self.maxsize):
                    raise UnprocessableError(f"unknown organisation '{organisation}' (BATON_AUTO_ORGANISATIONS is off)")
                enqueue_event(session, scheduler_id, event)
        except UnprocessableError as exc:
            dead_letter(channel, body, queue_name, str(exc))
            channel.basic_ack(tag)
            return
        except DatabaseUnavailableError:  # logged once, as an outage: give the message back
            channel.basic_nack(tag, requeue=True)
            self._wait_for_database()
            return
        except Exception as exc:  # a bug: give the message back, retry later
            log.warning("could not route an OpenKAT event; requeued", error=repr(exc))
            channel.basic_nack(tag, requeue=True)
            self._stop.wait(ROUTE_RETRY_SECONDS)
            return
        channel.basic_ack(tag)
        self.routed += 1

    def _wait_for_database(self) -> None:
        """Before the message comes back: until the outage ends (whoever in this process sees that
        first), at most ROUTE_RETRY_SECONDS, when this router tries again itself."""
        if DATABASE.available:  # the failure was not taken for an outage (an overloaded pool): pause briefly
            self._stop.wait(ROUTE_RETRY_SECONDS / 10)
        else:
            DATABASE.wait_until_available(ROUTE_RETRY_SECONDS)
