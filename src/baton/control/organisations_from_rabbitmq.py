"""Organisations arriving over RabbitMQ: applied to the database, so every director and worker sees
them (the database, not the message, is what reconciliation reads)."""

from __future__ import annotations

from collections.abc import Callable

from pika.adapters.blocking_connection import BlockingChannel
from pydantic import ValidationError

from baton.core.backoff import RECONNECT, fresh
from baton.core.errors import NotFoundError
from baton.core.logging import get_logger
from baton.core.settings import Settings
from baton.core.supervision import BackgroundService, retry_until_stopped
from baton.ingest.events import ORGANISATION_EVENT, OrganisationCreated, OrganisationDeleted
from baton.ingest.rabbitmq import (
    AMQP_ERRORS,
    ORGANISATIONS_QUEUE,
    broker_attempt,
    close_quietly,
    connect,
    dead_letter,
    declare_queue,
)
from baton.storage.control.organisations import create_organisation, delete_organisation, get_organisation
from baton.storage.engine import Store

log = get_logger("baton.organisations")
OrganisationEvent = OrganisationCreated | OrganisationDeleted


class OrganisationWatcher(BackgroundService):
    """Consumes `baton.organisations` and applies each event to the database before acking it."""

    thread_name = "organisation-watcher"

    def __init__(self, url: str, apply: Callable[[OrganisationEvent], None], prefetch: int = 20) -> None:
        super().__init__()
        self.url = url
        self.apply = apply
        self.prefetch = prefetch

    def run(self) -> None:
        # Failures go to the process's BROKER tracker, which logs an outage once (ingest/rabbitmq.py).
        retry_until_stopped(self._stop, self._consume, fresh(RECONNECT), AMQP_ERRORS, None)

    def _consume(self) -> None:
        with broker_attempt():
            connection = connect(self.url)
        try:
            with broker_attempt():
                channel = connection.channel()
                channel.confirm_delivery()
                channel.basic_qos(prefetch_count=self.prefetch)
                declare_queue(channel, ORGANISATIONS_QUEUE)
                messages = channel.consume(ORGANISATIONS_QUEUE, inactivity_timeout=0.5)
            log.info("watching organisations", queue=ORGANISATIONS_QUEUE)
            while not self.stopping:
                received = next(messages, None)
                if received is None:
                    return  # the broker cancelled the consumer: connect again
                method, _properties, body = received
                if method is not None:
                    self._handle(channel, method.delivery_tag, body or b"")
        finally:
            close_quietly(connection)

    def _handle(self, channel: BlockingChannel, tag: int, body: bytes) -> None:
        try:
            event = ORGANISATION_EVENT.validate_json(body)
        except ValidationError as exc:
            dead_letter(channel, body, ORGANISATIONS_QUEUE, f"malformed: {exc.errors(include_url=False)}")
            channel.basic_ack(tag)
            return
        try:
            self.apply(event)  # commits before we ack
        except AMQP_ERRORS:
            raise
        except Exception as exc:  # database down etc.: give the message back, retry later
            log.warning("could not apply organisation event; requeued", error=repr(exc))
            channel.basic_nack(tag, requeue=True)
            self._stop.wait(1.0)
            return
        channel.basic_ack(tag)


def organisation_applier(store: Store, settings: Settings) -> Callable[[OrganisationEvent], None]:
    """Apply an organisation event to the database, idempotently (a redelivery changes nothing)."""

    def apply(event: OrganisationEvent) -> None:
        org = event.organisation
        with store.session() as session:
            try:
                get_organisation(session, org.id)
                exists = True
            except NotFoundError:
                exists = False
            if isinstance(event, OrganisationCreated) and not exists:
                # A concurrent create by another director raises ConflictError: the message is
                # requeued, and on redelivery the organisation exists, so nothing more happens.
                create_organisation(session, org.id, org.name or org.id, settings.queue_maxsize)
            elif isinstance(event, OrganisationDeleted) and exists:
                delete_organisation(session, org.id)
            else:
                log.info("organisation event changes nothing", type=event.type, organisation=org.id)
                return
        log.info("organisation event applied", type=event.type, organisation=org.id)

    return apply
