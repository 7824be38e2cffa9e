"""Event-driven schedulers: events from a source become tasks, acked only after the commit that
handled them; a batch at a time, one event at a time only to find the one a batch cannot take."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from baton.core.errors import NotFoundError, QueueDisabledError, QueueFullError, UnprocessableError
from baton.core.model import SchedulerSpec
from baton.ingest.events import AnyEvent, Delivery, EventSource, event_organisation, parse_event
from baton.ingest.scheduler import Scheduler, SchedulerContext
from baton.storage.control.scheduler_leases import Claim
from baton.storage.engine import Session

# What makes one event of a batch unhandleable now: the batch is then handled one event at a time.
EVENT_FAILURES = (QueueFullError, UnprocessableError, NotFoundError, QueueDisabledError)


@dataclass
class Settlement:
    """What became of a batch's deliveries: handled (or rejected) ones are acked after the commit,
    deferred ones (the queue is full) are given back."""

    handled: list[Delivery] = field(default_factory=list)
    deferred: list[Delivery] = field(default_factory=list)


class EventDrivenScheduler(Scheduler):
    """Turns events from its source into tasks; ack only after the commit that handled them.

    A batch of events is handled in one transaction: parsed, planned together (one catalogue lookup
    per distinct question, one query for what exists already) and pushed in one statement. Only when
    one of its events cannot be handled (queue full, unprocessable) is the batch redone one event at
    a time, each in a savepoint, to find which: those are rejected or deferred, the rest handled.
    """

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        super().__init__(spec, context, claim)
        self.source: EventSource | None = None
        self.events_handled = 0
        self._drained = False  # the last tick received less than a batch: nothing was left waiting

    def setup(self) -> None:
        self.source = self.context.source_factory(self.spec)

    def inputs_announced(self) -> bool:
        return self.source is None or bool(getattr(self.source, "announced", False))

    def caught_up(self) -> bool:
        """Less than a batch received, every newer event announced, and announcements heard: on
        PostgreSQL while its process listens, a new event wakes it at once (and the process looks for
        unconsumed events every few poll intervals besides). On SQLite, or while the listener is
        away, only the look every poll interval would: it takes its next turn at once."""
        return self._drained and self.inputs_announced() and self.context.wakeups().listening

    def teardown(self) -> None:
        if self.source is not None:
            self.source.close()

    def tick(self) -> int:
        return self.handle_events(self.planning.clock())

    def handle_events(self, now: datetime) -> int:
        """One batch from the source, handled in one transaction at the turn's `now`; the events handled."""
        if self.source is None:
            return 0
        received: Sequence[Delivery] = []
        self._drained = False
        try:
            with self.transaction() as session:
                received = self.source.receive(session, self.batch_size)
                self._drained = len(received) < self.batch_size
                settlement = self._handle_deliveries(session, received, now)
        except Exception:
            for delivery in received:
                delivery.nack()
            raise
        for delivery in settlement.handled:
            delivery.ack()
        self.events_handled += len(settlement.handled)
        for delivery in settlement.deferred:
            delivery.nack()
        if settlement.deferred:  # queue full: give job runners time to drain it
            self.pause(self.settings.timing.poll_interval_seconds)
        return len(settlement.handled)

    def _handle_deliveries(self, session: Session, deliveries: Sequence[Delivery], now: datetime) -> Settlement:
        settlement = Settlement()
        parsed: list[tuple[Delivery, AnyEvent]] = []
        for delivery in deliveries:
            try:
                parsed.append((delivery, parse_event(delivery.payload)))
            except ValidationError as exc:
                self._reject(session, delivery, f"malformed event: {exc.errors(include_url=False)}")
                settlement.handled.append(delivery)
        if not parsed:
            return settlement
        try:
            with session.begin_nested():
                self.handle_batch(session, [event for _, event in parsed], now)
        except EVENT_FAILURES:
            self._handle_one_by_one(session, parsed, settlement, now)
            return settlement
        for delivery, _ in parsed:
            delivery.settle(session)
            settlement.handled.append(delivery)
        return settlement

    def _handle_one_by_one(
        self, session: Session, parsed: Sequence[tuple[Delivery, AnyEvent]], settlement: Settlement, now: datetime
    ) -> None:
        for index, (delivery, event) in enumerate(parsed):
            if not self._handle_event(session, delivery, event, now):
                settlement.deferred.extend(delivery for delivery, _ in parsed[index:])
                return
            settlement.handled.append(delivery)

    def _handle_event(self, session: Session, delivery: Delivery, event: AnyEvent, now: datetime) -> bool:
        """Handle one event in a savepoint. False: the queue is full, stop this batch."""
        try:
            with session.begin_nested():
                self.handle_batch(session, [event], now)
        except QueueFullError:
            self.log.warning("queue full; event deferred")
            return False
        except (UnprocessableError, NotFoundError, QueueDisabledError) as exc:
            self._reject(session, delivery, f"unprocessable event: {exc}")
            return True
        delivery.settle(session)
        return True

    def _reject(self, session: Session, delivery: Delivery, reason: str) -> None:
        self.log.warning("event rejected", reason=reason)
        delivery.reject(reason)
        delivery.settle(session)
        row = getattr(delivery, "row", None)
        if row is not None:
            row.error = reason

    @abstractmethod
    def handle_batch(self, session: Session, events: Sequence[AnyEvent], now: datetime) -> list[dict[str, object]]:
        """Create the tasks these events call for at `now`, exactly as handling them one after another
        would; raise as handling it alone would for the first event that cannot be handled."""

    def check_organisation(self, event: AnyEvent) -> None:
        named = event_organisation(event)
        if named is not None and named != self.spec.organisation:
            raise UnprocessableError(
                f"event for organisation '{named}' reached the scheduler of '{self.spec.organisation}'"
            )
