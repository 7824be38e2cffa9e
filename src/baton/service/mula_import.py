"""Taking over mula's state: what `baton import-mula` does, step by step.

1. Baton's database is looked at without writing: an import recorded as finished ends the run at once,
   changing nothing (mula's database need not be there any more).
2. mula's database is opened in one read-only snapshot and judged: not mula's, or a revision this
   release does not read, or unreachable, is refused in one line before anything is written.
3. A dry run reads every row through the same rules and counts; it writes nothing, not even Baton's
   migrations.
4. Otherwise Baton's database is migrated (the caller's `prepare`), and the import is recorded as begun:
   a first import needs a Baton database without tasks or schedules (Baton's own would mix with
   mula's); an unfinished one is completed, unless Baton has run since it began (then it could bring
   back a task Baton has handed out, finished and let retention remove).
5. Organisations, schedules, tasks (those not queued, then the queued ones in mula's pop order) and the
   grace period's memory are read and written a batch at a time, each batch its own transaction; the
   record is marked finished with the counts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from baton.core.errors import ConfigurationError
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.mula import (
    DUPLICATE_CHANGE,
    PENDING_CHANGE,
    ImportedRun,
    ImportedSchedule,
    ImportedTask,
    ImportTally,
    MulaLayout,
    NotMulaError,
    Skipped,
    imported_run,
    imported_schedule,
    imported_task,
    organisation_of,
    organisation_refusal,
    read_layout,
)
from baton.storage.control.liveness import DatabaseUnreachableError
from baton.storage.engine import Store, describe_database
from baton.storage.mula_import import target
from baton.storage.mula_import.source import MulaSnapshot, SourceCounts, open_snapshot
from baton.storage.mula_import.target import ImportRecord

log = get_logger("baton.import_mula")

BATCH_ROWS = 10_000
Kept = TypeVar("Kept", ImportedSchedule, ImportedRun)
Outcome = Literal["imported", "completed", "already", "dry-run", "absent"]


class Progress(Protocol):
    """Where the command shows how far each kind of row has come."""

    def begin(self, kind: str, total: int) -> None: ...

    def advance(self, rows: int) -> None: ...

    def end(self) -> None: ...


@dataclass
class ImportReport:
    """What a run did (or, dry, would do), for the command to print."""

    outcome: Outcome
    target: str  # Baton's database, described
    source: str | None = None  # mula's
    layout: MulaLayout | None = None
    counts: SourceCounts | None = None
    tally: ImportTally = field(default_factory=ImportTally)
    recorded: ImportRecord | None = None  # the finished import found ("already"), or an unfinished one
    note: str | None = None  # a dry run: what a real run would do first


@dataclass(frozen=True)
class TargetSpec:
    """Baton's database: BATON_DATABASE_URL, BATON_DATABASE_SCHEMA, and the size of new queues."""

    url: str
    schema: str | None
    queue_maxsize: int


def import_mula(
    source_url: str,
    spec: TargetSpec,
    *,
    prepare: Callable[[], Store],
    progress: Progress,
    dry_run: bool = False,
    if_present: bool = False,
) -> ImportReport:
    """Take over mula's state at `source_url` into Baton's database (module description)."""
    described = describe_database(spec.url, spec.schema)
    before = _inspect(spec, described)
    if before.record is not None and before.record.finished_at is not None:
        return ImportReport("already", described, recorded=before.record)
    with open_snapshot(source_url) as mula:
        facts = mula.facts()
        try:
            layout = read_layout(facts)
        except NotMulaError as exc:
            if if_present and exc.batons:  # Baton already runs there: nothing of mula's to take over
                return ImportReport("absent", described, source=facts.where, note=str(exc))
            raise ConfigurationError(str(exc)) from exc
        if layout is None:
            if if_present:
                return ImportReport("absent", described, source=facts.where)
            raise ConfigurationError(
                f"{facts.where} has none of mula's tables (tasks, schedules, alembic_version): not mula's database "
                "(with --if-present, a database without them means nothing to import)"
            )
        counts = mula.counts(layout)
        report = ImportReport("dry-run", described, source=facts.where, layout=layout, counts=counts)
        if dry_run:
            report.recorded = before.record
            report.note = _dry_note(before)
            _copy(mula, layout, None, spec, report, progress)
            report.tally["tasks"].changed[DUPLICATE_CHANGE] = counts.queued_duplicates
            return report
        store = prepare()
        report.outcome, report.recorded = _begin(store, described, facts.where, layout)
        _copy(mula, layout, store, spec, report, progress)
        with store.session() as session:
            target.finish_record(session, {"counts": asdict(counts), **report.tally.as_json()}, utcnow())
        log.info("mula's state imported", target=described, **_totals(report.tally))
        return report


def _inspect(spec: TargetSpec, described: str) -> target.TargetState:
    try:
        state = target.inspect_target(spec.url, spec.schema)
    except DatabaseUnreachableError as exc:
        raise ConfigurationError(
            f"cannot reach Baton's database, {described} ({exc}); check BATON_DATABASE_URL"
        ) from exc
    if state.foreign is not None:
        raise ConfigurationError(state.foreign)
    return state


def _dry_note(before: target.TargetState) -> str:
    if not before.exists:
        return "Baton's database does not exist yet: a run creates and migrates it first"
    if before.revision is None:
        return "Baton's database has no schema yet: a run migrates it first"
    if before.record is not None:
        return f"an import began at {_when(before.record.started_at)} and did not finish: a run completes it"
    if before.rows is not None and (before.rows.tasks or before.rows.schedules):
        return (
            f"Baton's database holds {before.rows.tasks} tasks and {before.rows.schedules} schedules of its own: "
            "a run would refuse to mix mula's with them"
        )
    return "Baton's database is ready: a run migrates it if needed, then imports"


def _when(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _begin(store: Store, described: str, source: str, layout: MulaLayout) -> tuple[Outcome, target.ImportRecord | None]:
    """Record the import as begun, or check that an unfinished one may be completed."""
    with store.session() as session:
        record = target.import_record(session)
        if record is not None and record.finished_at is not None:  # a run finished meanwhile
            raise ConfigurationError(f"mula's state was imported into {described} at {_when(record.finished_at)}")
        if record is not None:
            ran = target.activity_since(session, record.started_at)
            if ran is not None:
                raise ConfigurationError(
                    f"an import of mula's state into {described} began at {_when(record.started_at)} and did not "
                    f"finish, and Baton has run since ({ran}): completing it could bring back tasks Baton handed out "
                    "since; start again with an empty Baton database or schema (docs/openkat.md)"
                )
            return "completed", record
        own = target.own_rows(session)
        if own.tasks or own.schedules:
            raise ConfigurationError(
                f"{described} holds {own.tasks} tasks and {own.schedules} schedules of its own: import-mula takes "
                "over mula's state before Baton first runs; use an empty Baton database or schema"
            )
        target.begin_record(session, source, layout.revision, utcnow())
    return "imported", None


def _copy(
    mula: MulaSnapshot,
    layout: MulaLayout,
    store: Store | None,
    spec: TargetSpec,
    report: ImportReport,
    progress: Progress,
) -> None:
    """Every kind of row, read and (with a store) written; `store` None: a dry run."""
    counts = report.counts
    assert counts is not None
    log.info(
        "reading mula's database",
        source=report.source,
        revision=layout.revision,
        schedules=counts.schedules,
        tasks=counts.finished_tasks + counts.queued_tasks,
        dry_run=store is None,
    )
    organisations = _organisations(mula, layout, store, spec, report.tally, progress)
    # A first import writes into a database without tasks or schedules: nothing it copies can be there.
    copier = _Copier(mula, layout, store, organisations, report.tally, progress, first=report.outcome == "imported")
    progress.begin("schedules", counts.schedules)
    copier.schedules()
    progress.end()
    progress.begin("tasks", counts.finished_tasks + counts.queued_tasks)
    for queued in (False, True):
        copier.tasks(queued=queued)
    progress.end()
    progress.begin("boefje runs", counts.boefje_tasks)  # at most that many
    copier.runs()
    progress.end()
    if store is None:  # a dry run: what a run into an empty database would add
        for kind in report.tally.kinds.values():
            kind.added = kind.read - sum(kind.skipped.values())


@dataclass
class _Copier:
    """One pass per kind of row. mula's batches are read and mapped through core's rules on a thread of their
    own (`read_ahead`) while the batch before is written (each batch its own transaction), so Baton's
    database is kept busy writing."""

    mula: MulaSnapshot
    layout: MulaLayout
    store: Store | None  # None: a dry run
    organisations: set[str]
    tally: ImportTally
    progress: Progress
    first: bool

    def schedules(self) -> None:
        kind = self.tally["schedules"]

        def mapped() -> Iterator[tuple[int, list[ImportedSchedule]]]:
            for rows in self.mula.schedules(self.layout, BATCH_ROWS):
                kind.read += len(rows)
                yield len(rows), _kept((imported_schedule(row, self.organisations) for row in rows), kind.skipped)

        for read, schedules in read_ahead(mapped()):
            if self.store is not None:
                with self.store.session() as session:
                    added = target.add_schedules(session, schedules, first=self.first)
                kind.added += added
                kind.present += len(schedules) - added
            self.progress.advance(read)

    def tasks(self, *, queued: bool) -> None:
        kind, statuses = self.tally["tasks"], self.tally.statuses

        def mapped() -> Iterator[tuple[int, list[ImportedTask]]]:
            for rows in self.mula.tasks(self.layout, BATCH_ROWS, queued=queued):
                tasks: list[ImportedTask] = []
                for row in rows:
                    statuses[row.status.lower()] += 1
                    verdict = imported_task(row, self.organisations)
                    if isinstance(verdict, Skipped):
                        kind.skipped[verdict.reason] += 1
                        continue
                    if row.status == "PENDING":
                        kind.changed[PENDING_CHANGE] += 1
                    tasks.append(verdict)
                kind.read += len(rows)
                yield len(rows), tasks

        for read, tasks in read_ahead(mapped()):
            if self.store is not None:
                with self.store.session() as session:
                    batch = target.add_tasks(session, tasks, queued=queued, first=self.first)
                kind.added += batch.added + batch.duplicates
                kind.changed[DUPLICATE_CHANGE] += batch.duplicates
                kind.present += len(tasks) - batch.added - batch.duplicates
            self.progress.advance(read)

    def runs(self) -> None:
        kind = self.tally["boefje_runs"]

        def mapped() -> Iterator[tuple[int, list[ImportedRun]]]:
            for rows in self.mula.boefje_runs(self.layout, BATCH_ROWS):
                kind.read += len(rows)
                yield len(rows), _kept((imported_run(row, self.organisations) for row in rows), kind.skipped)

        for read, runs in read_ahead(mapped()):
            if self.store is not None:
                with self.store.session() as session:
                    changed = target.add_boefje_runs(session, runs)
                kind.added += changed
                kind.present += len(runs) - changed
            self.progress.advance(read)


Batch = TypeVar("Batch")
READ_AHEAD = 2  # batches read and waiting while one is written: memory stays a few batches


def read_ahead(batches: Iterator[Batch], depth: int = READ_AHEAD) -> Iterator[Batch]:
    """`batches` in order, each read on a thread of its own while the caller handles the ones before (reading
    mula's database and writing Baton's overlap). A caller that stops early stops the reading, which closes
    `batches` (and its cursor) on that thread."""
    waiting: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(("batch", batch)):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the caller, raised there
            put(("error", exc))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=read, name="import-mula-reader", daemon=True)
    reader.start()
    try:
        while True:
            what, item = waiting.get()
            if what == "end":
                return
            if what == "error":
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


def _kept(verdicts: Iterable[Kept | Skipped], skipped: dict[str, int]) -> list[Kept]:
    kept: list[Kept] = []
    for verdict in verdicts:
        if isinstance(verdict, Skipped):
            skipped[verdict.reason] = skipped.get(verdict.reason, 0) + 1
        else:
            kept.append(verdict)
    return kept


def _organisations(
    mula: MulaSnapshot,
    layout: MulaLayout,
    store: Store | None,
    spec: TargetSpec,
    tally: ImportTally,
    progress: Progress,
) -> set[str]:
    """Every organisation mula's rows name that Baton can hold, made (with its queues) where missing."""
    named = {organisation_of(code, scheduler_id or "") for code, scheduler_id in mula.organisations(layout)}
    codes = sorted(code for code in named if code is not None)
    kind = tally["organisations"]
    progress.begin("organisations", len(codes))
    accepted: list[str] = []
    for code in codes:
        refusal = organisation_refusal(code)
        if refusal is None:
            accepted.append(code)
        else:
            kind.skipped[refusal] += 1
    kind.read = len(codes)
    if store is not None:
        with store.session() as session:
            kind.added = target.add_organisations(session, accepted, spec.queue_maxsize)
        kind.present = len(accepted) - kind.added
    progress.advance(len(codes))
    progress.end()
    return set(accepted)


def _totals(tally: ImportTally) -> dict[str, int]:
    return {f"{kind}_added": counts.added for kind, counts in tally.kinds.items()}
