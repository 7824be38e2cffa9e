"""The runs Baton did not see: before a boefje task is queued, Bytes is asked when the (boefje, object) last
ran, for the pairs whose grace period Baton's own memory (`boefje_runs`) would grant. Every run OpenKAT
records goes to Bytes, including those Baton never queued (mula's, before Baton took over; those started
from OpenKAT's boefjes API), so without asking, the first listing of a catalogue would queue every enabled
boefje on every object again.

The maker of boefje tasks refuses (`LastRunsUnknown`) to grant a claim Bytes was not asked about; its
caller asks outside any transaction (`LastRuns.learn`) and makes its tasks again (`with_last_runs`). A run
Bytes knows that ended within the grace period is written into `boefje_runs` as the pair's last run, in
the transaction that claims, so it holds the pair back as Baton's own runs do and Bytes is not asked about
it again. Bytes failing (or held back while it fails: once per poll per process) delays the tasks: the
caller leaves its events, its schedules or its backfill page for later, as when Octopoes fails.

How Bytes is asked, per organisation and boefje: for a few objects, mula's question, once per object
(`GET /bytes/boefje_meta?...&input_ooi=<object>&limit=1`); for more, one listing of the boefje's runs on
every object since the grace horizon, newest first, a page at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from baton.core.errors import OutsideServiceError
from baton.ingest.outside_links import OutsideLinks
from baton.storage.engine import Session
from baton.storage.scheduling.boefje_runs import last_queued, remember_boefje_runs

if TYPE_CHECKING:
    from baton.openkat import BytesClient
    from baton.openkat.models import BoefjeMeta

T = TypeVar("T")
Pair = tuple[str, str]  # (boefje id, object key; "" for a job without an object)
ASK_EACH_UP_TO = 10  # objects of one boefje asked about one by one; beyond, one listing of its runs
LISTING_PAGE = 500  # runs per page of a listing
ATTEMPTS = 8  # tries of one piece of work in a turn: each learns what Bytes says of the pairs the last lacked


class LastRunsUnknown(Exception):
    """The maker may not grant these claims before Bytes is asked about them."""

    def __init__(self, organisation: str, pairs: Sequence[Pair], grace: timedelta) -> None:
        super().__init__(f"Bytes not asked yet about {len(pairs)} (boefje, object) pairs of {organisation}")
        self.organisation = organisation
        self.pairs = pairs
        self.grace = grace


def ran_at(run: BoefjeMeta | None) -> datetime | None:
    """When a run counts from: its end (mula compares Bytes' `ended_at`), its start while it runs."""
    return None if run is None else run.ended_at or run.started_at


class LastRuns:
    """What Bytes said this turn of the last runs of (organisation, boefje, object), for a scheduler's maker of
    boefje tasks. The answers are kept for one turn (one `now`): the pairs they move into `boefje_runs` need
    not be asked again, the others are claimed by the turn's tasks."""

    def __init__(self, links: OutsideLinks, task_timeout_seconds: float) -> None:
        self.links = links
        # A run is listed by its start: one that started this long before the horizon may have ended after it.
        self.longest_run = timedelta(seconds=task_timeout_seconds)
        self._turn: datetime | None = None
        self._answers: dict[tuple[str, str, str], datetime | None] = {}

    def _answers_at(self, now: datetime) -> dict[tuple[str, str, str], datetime | None]:
        if now != self._turn:
            self._turn, self._answers = now, {}
        return self._answers

    def check(
        self, session: Session, organisation: str, pairs: Collection[Pair], now: datetime, grace: timedelta
    ) -> None:
        """Before claiming `pairs`: raise `LastRunsUnknown` with those Baton would grant and Bytes was not
        asked about this turn; else write the runs Bytes knows that ended within the grace period into
        `boefje_runs`, so the claims see them."""
        granted = self._granted(session, organisation, pairs, now, grace)
        answers = self._answers_at(now)
        unknown = sorted(pair for pair in granted if (organisation, *pair) not in answers)
        if unknown:
            raise LastRunsUnknown(organisation, unknown, grace)
        runs = [
            (boefje_id, object_key, at)
            for boefje_id, object_key in sorted(granted)
            if (at := answers[(organisation, boefje_id, object_key)]) is not None and at > now - grace
        ]
        remember_boefje_runs(session, organisation, runs)

    def unknown(
        self, session: Session, organisation: str, pairs: Collection[Pair], now: datetime, grace: timedelta
    ) -> LastRunsUnknown | None:
        """What `check` would refuse, without refusing: for a caller that asks before its transaction."""
        answers = self._answers_at(now)
        granted = self._granted(session, organisation, pairs, now, grace)
        unknown = sorted(pair for pair in granted if (organisation, *pair) not in answers)
        return LastRunsUnknown(organisation, unknown, grace) if unknown else None

    def _granted(
        self, session: Session, organisation: str, pairs: Collection[Pair], now: datetime, grace: timedelta
    ) -> set[Pair]:
        """The pairs whose claim Baton's own memory would grant (none when nothing holds a pair back)."""
        if grace <= timedelta(0) or not pairs:
            return set()
        known = last_queued(session, organisation, pairs)
        return {pair for pair in pairs if (last := known.get(pair)) is None or last <= now - grace}

    def learn(self, unknown: LastRunsUnknown, now: datetime) -> None:
        """Ask Bytes about the pairs, outside any transaction; raises `OutsideServiceError` when it does not
        answer (or is held back while it fails)."""
        answers = self._answers_at(now)
        by_boefje: dict[str, list[str]] = {}
        for boefje_id, object_key in unknown.pairs:
            by_boefje.setdefault(boefje_id, []).append(object_key)
        for boefje_id, objects in by_boefje.items():
            if len(objects) <= ASK_EACH_UP_TO:
                for object_key in objects:
                    run = self._last_run(unknown.organisation, boefje_id, object_key, now)
                    answers[(unknown.organisation, boefje_id, object_key)] = ran_at(run)
            else:
                since = now - unknown.grace - self.longest_run
                latest = self._runs_since(unknown.organisation, boefje_id, since, now)
                for object_key in objects:
                    answers[(unknown.organisation, boefje_id, object_key)] = latest.get(object_key)

    def _last_run(self, organisation: str, boefje_id: str, object_key: str, now: datetime) -> BoefjeMeta | None:
        client = self._client()
        return self.links.call(client.http, now, lambda: client.last_run(organisation, boefje_id, object_key or None))

    def _runs_since(self, organisation: str, boefje_id: str, since: datetime, now: datetime) -> dict[str, datetime]:
        """The latest run of the boefje on each object since `since` (by start)."""
        client = self._client()

        def listing() -> dict[str, datetime]:
            latest: dict[str, datetime] = {}
            for run in client.boefje_runs(organisation, boefje_id, since=since, page_size=LISTING_PAGE):
                at = ran_at(run)
                key = run.input_ooi or ""
                if at is not None and (key not in latest or at > latest[key]):
                    latest[key] = at
            return latest

        return self.links.call(client.http, now, listing)

    def _client(self) -> BytesClient:
        assert self.links.bytes is not None  # made only where Bytes is configured
        return self.links.bytes


def with_last_runs(last_runs: LastRuns | None, now: datetime, work: Callable[[], T]) -> T:
    """`work` (a whole transaction that makes boefje tasks), done again after asking Bytes about the pairs it
    lacked; raises `OutsideServiceError` when Bytes does not answer (the work then waits)."""
    for _ in range(ATTEMPTS):
        try:
            return work()
        except LastRunsUnknown as unknown:
            if last_runs is None:
                raise
            last_runs.learn(unknown, now)
    raise OutsideServiceError("bytes", "new pairs to ask about kept coming this turn; tried again next turn")
