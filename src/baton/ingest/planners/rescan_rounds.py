"""Rescan rounds: due boefje schedules become boefje tasks again, checked in bulk first.

Every boefje task the boefje planner queues (from an event, a new boefje's backfill, a rescan) and every one
rocky pushes gets a schedule (boefje_tasks.py `schedule_for`): one per (organisation, boefje, object), keyed
by the job's hash, due again after the grace period plus a random jitter, or at the plugin's cron or interval.

Each organisation's boefje scheduler runs a round every BATON_RESCAN_INTERVAL_SECONDS: it reads ALL its due
schedules a page at a time, oldest deadline first, and checks each page in bulk: the plugin against the
organisation's catalogue in the database (which the KATalogus sync keeps: no call), the objects with one
Octopoes `load_bulk` per 500 references (when Octopoes is configured), the grace period against
`boefje_runs` (Baton's record of every task it queued, kept through retention, so a cancelled task blocks
nothing). A page's tasks go through the one maker of boefje tasks in one fenced transaction that also
writes every schedule's outcome: queued (last run, next deadline), ran within the grace period (next
deadline from that run), or disabled with its reason. A disabled schedule is enabled again when its reason
goes away: its plugin enabled again (the next round notices), or a new task for its object (a scan-profile
message showing it at a sufficient level). An Octopoes outage leaves the page due for the next round, and
a Bytes outage (with Bytes configured, the maker asks it about runs Baton did not see: last_runs.py) the
page's schedules that were to run; nothing is ever disabled for a service that did not answer.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from baton.core.errors import NotFoundError, OutsideServiceError, QueueFullError
from baton.core.rescans import (
    WAIT,
    ObjectView,
    Outcome,
    PluginView,
    Verdict,
    grace_of,
    judge,
    judge_without_object,
    next_rescan,
    object_type_of,
)
from baton.ingest.planners.boefje_tasks import BoefjeTaskMaker
from baton.ingest.planners.last_runs import with_last_runs
from baton.ingest.planning import Planning
from baton.storage.engine import Session
from baton.storage.scheduling.boefje_schedules import (
    DueSchedule,
    Settled,
    boefje_of,
    due_schedules,
    reenable_for_plugins,
    settle_schedules,
)
from baton.storage.tables import Plugin


@dataclass
class Round:
    """One pass over the schedules due when it began, a page per turn."""

    started_at: datetime
    after: tuple[datetime, uuid.UUID] | None = None
    seen: int = 0
    queued: int = 0
    disabled: int = 0
    waiting: int = 0


@dataclass
class Tally:
    """What one page's transaction decided."""

    queued: int = 0
    disabled: int = 0
    waiting: int = 0


class RescanRounds:
    """An organisation's rounds over its due boefje schedules, a page per turn."""

    def __init__(self, planning: Planning, tasks: BoefjeTaskMaker, page_size: int = 1000) -> None:
        self.planning = planning
        self.tasks = tasks
        self.page_size = page_size  # schedules per page: one transaction, two Octopoes calls
        self.rng = random.Random()
        self.round: Round | None = None
        self.next_round_at: datetime | None = None
        self._enabled_before: frozenset[str] | None = None

    def step(self, now: datetime) -> int:
        """One page of the current round (a round begins when the last began an interval ago); how much it
        did (0: no round now, or the round is over)."""
        if self.round is None:
            if self.next_round_at is not None and now < self.next_round_at:
                return 0
            self.round = Round(now)
            self.next_round_at = now + timedelta(seconds=self.planning.settings.openkat.rescan_interval_seconds)
            self._plugins_enabled_again(now)
        current = self.round
        organisation = self.planning.organisation
        with self.planning.read() as session:
            page = due_schedules(session, organisation, current.started_at, current.after, self.page_size)
            plugins = {plugin.id: plugin for plugin in self.planning.catalogue.enabled_boefjes(session, organisation)}
        if not page:
            self._finish(current)
            return 0
        verdicts = self._check(page, plugins, now)
        try:
            try:
                tally = with_last_runs(self.tasks.last_runs, now, lambda: self._apply(page, verdicts, plugins, now))
            except OutsideServiceError:  # Bytes did not answer: those to run stay due for the next round
                waiting = [WAIT if verdict.outcome is Outcome.RUN else verdict for verdict in verdicts]
                tally = self._apply(page, waiting, plugins, now)
        except QueueFullError:  # the queue has no room: the page waits for the runners to pop
            self.planning.pause(self.planning.settings.timing.poll_interval_seconds)
            return 0
        current.queued += tally.queued
        current.disabled += tally.disabled
        current.waiting += tally.waiting
        current.after = (page[-1].deadline_at, page[-1].id)
        current.seen += len(page)
        return len(page)

    def _finish(self, current: Round) -> None:
        self.round = None
        if current.seen:
            self.planning.log.info(
                "rescan round done",
                schedules=current.seen,
                queued=current.queued,
                disabled=current.disabled,
                left_due=current.waiting,
            )

    def _plugins_enabled_again(self, now: datetime) -> None:
        """Schedules disabled because their boefje was not enabled come back when it is: at the first round
        and whenever a round finds boefjes enabled that the previous one did not."""
        organisation = self.planning.organisation
        with self.planning.read() as session:
            enabled = frozenset(plugin.id for plugin in self.planning.catalogue.enabled_boefjes(session, organisation))
        gained = enabled if self._enabled_before is None else enabled - self._enabled_before
        self._enabled_before = enabled
        if gained:
            with self.planning.transaction() as session:
                reenable_for_plugins(session, organisation, gained, now)

    def _check(self, page: Sequence[DueSchedule], plugins: dict[str, Plugin], now: datetime) -> list[Verdict]:
        """Each schedule's verdict; the objects of the page's schedules whose plugin is enabled are read from
        Octopoes in bulk (500 references per call)."""
        views: list[PluginView | None] = []
        for due in page:
            plugin = plugins.get(boefje_of(due.data) or "")
            views.append(None if plugin is None else PluginView(plugin.id, plugin.consumes, plugin.scan_level))
        references = [str(due.data.get("input_ooi") or "") for due in page]
        wanted = {reference for reference, view in zip(references, views, strict=True) if reference and view}
        seen = self._objects(wanted, now)
        verdicts = []
        for due, view, reference in zip(page, views, references, strict=True):
            if not reference:  # a job without an object: the plugin alone is checked
                verdicts.append(judge_without_object(boefje_of(due.data) or "?", view))
                continue
            if seen is None:
                found: ObjectView | None = None
            elif reference in seen:
                found = seen[reference]
            else:
                found = ObjectView(False, object_type_of(reference))
            verdicts.append(judge(boefje_of(due.data) or "?", view, found))
        return verdicts

    def _objects(self, references: set[str], now: datetime) -> dict[str, ObjectView] | None:
        """The objects as Octopoes has them now; without Octopoes, as their references say (type only,
        level unknown: the grace period alone decides); None: Octopoes could not be asked now."""
        links = self.planning.links
        octopoes = None if links is None else links.octopoes
        if octopoes is None or links is None:
            return {reference: ObjectView(True, object_type_of(reference)) for reference in references}
        if not references:
            return {}
        organisation = self.planning.organisation
        try:
            found = links.call(octopoes.http, now, lambda: octopoes.load_bulk(organisation, references, valid_time=now))
        except OutsideServiceError:
            return None  # held back, or failed: logged once per outage by the client
        except NotFoundError:
            return None  # Octopoes does not know the organisation (yet): not the same as every object gone
        return {key: ObjectView(True, item.object_type, item.scan_level) for key, item in found.items()}

    def _apply(
        self, page: Sequence[DueSchedule], verdicts: Sequence[Verdict], plugins: dict[str, Plugin], now: datetime
    ) -> Tally:
        """The page's tasks and every schedule's outcome, in one fenced transaction."""
        with self.planning.transaction() as session:
            return self._settle(session, page, verdicts, plugins, now)

    def _settle(
        self,
        session: Session,
        page: Sequence[DueSchedule],
        verdicts: Sequence[Verdict],
        plugins: dict[str, Plugin],
        now: datetime,
    ) -> Tally:
        tally = Tally()
        settled: list[Settled] = []
        by_grace: dict[timedelta, list[tuple[DueSchedule, Plugin]]] = {}
        for due, verdict in zip(page, verdicts, strict=True):
            if verdict.outcome is Outcome.WAIT:
                tally.waiting += 1
            elif verdict.outcome is Outcome.DISABLE:
                tally.disabled += 1
                settled.append(Settled(due.id, due.deadline_at, due.last_run_at, False, verdict.reason, verdict.detail))
            else:
                plugin = plugins[boefje_of(due.data) or ""]
                # A cron says when to run: only the plugin's interval (if any) holds it back, not the grace period.
                grace = grace_of(
                    0 if due.schedule or plugin.cron else self.planning.settings.grace_period_seconds, plugin.interval
                )
                by_grace.setdefault(grace, []).append((due, plugin))
        for grace, pairs in by_grace.items():
            wanted = [(plugin, str(due.data.get("input_ooi") or "") or None) for due, plugin in pairs]
            ids = {(plugin.id, key): due.id for (due, plugin), (_, key) in zip(pairs, wanted, strict=True)}
            plan = self.tasks.make(session, wanted, now, grace=grace, schedules=ids)
            for (due, plugin), claim in zip(pairs, plan.claims, strict=True):
                if claim.claimed:
                    tally.queued += 1
                    settled.append(Settled(due.id, self._next(due, plugin, now), now))
                else:  # queued within the grace period (by an event, say): due again counted from that run
                    deadline = self._next(due, plugin, claim.previous_run or now)
                    settled.append(Settled(due.id, max(deadline, now + timedelta(seconds=1)), due.last_run_at))
        settle_schedules(session, settled, now)
        return tally

    def _next(self, due: DueSchedule, plugin: Plugin, after: datetime) -> datetime:
        settings = self.planning.settings
        return next_rescan(
            after,
            grace_seconds=settings.grace_period_seconds,
            jitter_seconds=settings.openkat.rescan_jitter_seconds,
            cron=due.schedule or plugin.cron,
            interval_minutes=plugin.interval,
            rng=self.rng,
        )
