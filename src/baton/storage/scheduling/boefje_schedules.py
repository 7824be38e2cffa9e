"""The SQL of periodic rescans: boefje schedules kept (one per organisation, boefje and object, keyed by the
job's hash), the due ones read a page at a time oldest deadline first, and what a round decided written back
in bulk. The decisions are ingest/planners/rescan_rounds.py's, the rules core/rescans.py's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, delete, or_, select, text, update
from sqlalchemy.orm import Session

from baton.core.model import SchedulerType
from baton.core.rescans import OBJECT_REASONS, PLUGIN_NOT_ENABLED
from baton.storage.engine import insert_for, on_postgresql
from baton.storage.scheduling.boefje_runs import record_boefje_run
from baton.storage.tables import Plugin, Schedule, Task

BOEFJE = SchedulerType.BOEFJE.value


@dataclass(frozen=True)
class KeptSchedule:
    """A boefje task's schedule: the job to queue again, and when (a cron copied from the plugin, or none)."""

    organisation: str
    hash: str
    data: dict[str, Any]
    deadline_at: datetime
    cron: str | None = None


def keep_schedules(session: Session, kept: Sequence[KeptSchedule], now: datetime) -> dict[str, uuid.UUID]:
    """Create or refresh the schedules of tasks just queued: the job, the last run (now) and the next deadline.
    One the rescans disabled for a reason is enabled again (a new task for its object proves the reason gone);
    one disabled by hand stays disabled. One statement, rows in hash order (concurrent upserts never
    deadlock); the schedules' ids by hash."""
    if not kept:
        return {}
    unique = sorted({item.hash: item for item in kept}.values(), key=lambda item: item.hash)
    if on_postgresql(session):
        rows = session.execute(
            _KEEP_POSTGRESQL,
            {
                "ids": [uuid.uuid4() for _ in unique],
                "organisations": [item.organisation for item in unique],
                "hashes": [item.hash for item in unique],
                "documents": [json.dumps(item.data) for item in unique],
                "crons": [item.cron for item in unique],
                "deadlines": [item.deadline_at for item in unique],
                "now": now,
            },
        )
        return {schedule_hash: schedule_id for schedule_hash, schedule_id in rows}
    insert = insert_for(session)(Schedule)
    reenable = Schedule.disabled_reason.in_(sorted(OBJECT_REASONS))
    stmt = (
        insert.values(
            [
                {
                    "id": uuid.uuid4(),
                    "scheduler_id": BOEFJE,
                    "organisation": item.organisation,
                    "hash": item.hash,
                    "data": item.data,
                    "enabled": True,
                    "schedule": item.cron,
                    "deadline_at": item.deadline_at,
                    "last_run_at": now,
                    "created_at": now,
                    "modified_at": now,
                }
                for item in unique
            ]
        )
        .on_conflict_do_update(
            index_elements=[Schedule.hash],
            set_={
                "data": insert.excluded.data,
                "schedule": insert.excluded.schedule,
                "deadline_at": insert.excluded.deadline_at,
                "last_run_at": insert.excluded.last_run_at,
                "modified_at": insert.excluded.modified_at,
                "enabled": case((reenable, True), else_=Schedule.enabled),
                "disabled_reason": case((reenable, None), else_=Schedule.disabled_reason),
                "disabled_detail": case((reenable, None), else_=Schedule.disabled_detail),
            },
            where=Schedule.scheduler_id == BOEFJE,
        )
        .returning(Schedule.hash, Schedule.id)
    )
    return {schedule_hash: schedule_id for schedule_hash, schedule_id in session.execute(stmt)}


# PostgreSQL: one statement text whatever the batch (arrays, not a VALUES list compiled per batch).
_REENABLE_SQL = "s.disabled_reason IN (" + ", ".join(f"'{reason}'" for reason in sorted(OBJECT_REASONS)) + ")"
_KEEP_POSTGRESQL = text(
    f"""
INSERT INTO schedules AS s (id, scheduler_id, organisation, hash, data, enabled, schedule, deadline_at,
                            last_run_at, created_at, modified_at)
SELECT u.id, '{BOEFJE}', u.organisation, u.hash, u.data, true, u.cron, u.deadline, :now, :now, :now
FROM unnest(CAST(:ids AS uuid[]), CAST(:organisations AS text[]), CAST(:hashes AS text[]),
            CAST(CAST(:documents AS text[]) AS jsonb[]), CAST(:crons AS text[]), CAST(:deadlines AS timestamptz[]))
     AS u(id, organisation, hash, data, cron, deadline)
ORDER BY u.hash
ON CONFLICT (hash) DO UPDATE SET
    data = excluded.data, schedule = excluded.schedule, deadline_at = excluded.deadline_at,
    last_run_at = excluded.last_run_at, modified_at = excluded.modified_at,
    enabled = CASE WHEN {_REENABLE_SQL} THEN true ELSE s.enabled END,
    disabled_reason = CASE WHEN {_REENABLE_SQL} THEN NULL ELSE s.disabled_reason END,
    disabled_detail = CASE WHEN {_REENABLE_SQL} THEN NULL ELSE s.disabled_detail END
WHERE s.scheduler_id = '{BOEFJE}'
RETURNING s.hash, s.id
"""
)


def keep_pushed_schedule(session: Session, kept: KeptSchedule, task_id: uuid.UUID, now: datetime) -> uuid.UUID | None:
    """The schedule of a task pushed from outside (rocky's manual run), the task linked to it, and the run
    recorded in `boefje_runs` (so a scan-profile message within the grace period does not queue it again)."""
    boefje_id, object_key = boefje_of(kept.data), kept.data.get("input_ooi")
    if boefje_id and isinstance(object_key, str) and object_key:
        record_boefje_run(session, kept.organisation, boefje_id, object_key, now)
    schedule_id = keep_schedules(session, [kept], now).get(kept.hash)
    if schedule_id is not None:
        session.execute(update(Task).where(Task.id == task_id).values(schedule_id=str(schedule_id)))
    return schedule_id


def reenable_schedules(session: Session, organisation: str, hashes: Collection[str], now: datetime) -> int:
    """Enable again the schedules of (boefje, object) pairs the planner found fit to scan but did not queue
    (they ran within the grace period) that the rescans had disabled; their deadlines stay."""
    if not hashes:
        return 0
    result = session.execute(
        update(Schedule)
        .where(
            Schedule.organisation == organisation,
            Schedule.hash.in_(sorted(set(hashes))),
            Schedule.disabled_reason.in_(sorted(OBJECT_REASONS)),
        )
        .values(enabled=True, disabled_reason=None, disabled_detail=None, modified_at=now)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def reenable_for_plugins(session: Session, organisation: str, plugin_ids: Collection[str], now: datetime) -> int:
    """Enable again the organisation's schedules disabled because their boefje was not enabled, for the
    boefjes enabled now; their old deadline has passed, so the next round checks their objects."""
    wanted = set(plugin_ids)
    if not wanted:
        return 0
    found = session.execute(
        select(Schedule.id, Schedule.data).where(
            Schedule.organisation == organisation,
            Schedule.scheduler_id == BOEFJE,
            Schedule.disabled_reason == PLUGIN_NOT_ENABLED,
        )
    ).all()
    ids = [schedule_id for schedule_id, data in found if boefje_of(data) in wanted]
    for start in range(0, len(ids), 1000):
        session.execute(
            update(Schedule)
            .where(Schedule.id.in_(ids[start : start + 1000]))
            .values(enabled=True, disabled_reason=None, disabled_detail=None, modified_at=now)
        )
    return len(ids)


def plugin_timing(session: Session, plugin_id: str) -> tuple[str | None, int | None]:
    """A plugin's cron and interval, as the catalogue has them (none for a plugin it does not know)."""
    row = session.execute(select(Plugin.cron, Plugin.interval).where(Plugin.id == plugin_id)).first()
    return (None, None) if row is None else (row.cron, row.interval)


def boefje_of(data: dict[str, Any]) -> str | None:
    boefje = data.get("boefje")
    return boefje.get("id") if isinstance(boefje, dict) else None


@dataclass(frozen=True)
class DueSchedule:
    id: uuid.UUID
    hash: str | None
    data: dict[str, Any]
    schedule: str | None
    deadline_at: datetime
    last_run_at: datetime | None


def due_schedules(
    session: Session, organisation: str, now: datetime, after: tuple[datetime, uuid.UUID] | None, limit: int
) -> list[DueSchedule]:
    """The organisation's enabled boefje schedules due at `now`, oldest deadline first, after `after` (the
    last of the previous page: one skipped for now keeps its deadline and is not read again this round)."""
    conditions = [
        Schedule.scheduler_id == BOEFJE,
        Schedule.organisation == organisation,
        Schedule.enabled.is_(True),
        Schedule.deadline_at <= now,
    ]
    if after is not None:
        deadline, last_id = after
        conditions.append(
            or_(Schedule.deadline_at > deadline, and_(Schedule.deadline_at == deadline, Schedule.id > last_id))
        )
    rows = session.execute(
        select(Schedule.id, Schedule.hash, Schedule.data, Schedule.schedule, Schedule.deadline_at, Schedule.last_run_at)
        .where(*conditions)
        .order_by(Schedule.deadline_at, Schedule.id)
        .limit(limit)
    ).all()
    return [DueSchedule(*row) for row in rows]


@dataclass(frozen=True)
class Settled:
    """What a round decided for one schedule."""

    id: uuid.UUID
    deadline_at: datetime | None
    last_run_at: datetime | None
    enabled: bool = True
    disabled_reason: str | None = None
    disabled_detail: str | None = None


def settle_schedules(session: Session, settled: Sequence[Settled], now: datetime) -> None:
    """Write a round's decisions by primary key: on PostgreSQL one statement over arrays, elsewhere one
    executemany."""
    if not settled:
        return
    ordered = sorted(settled, key=lambda item: str(item.id))
    if on_postgresql(session):
        session.execute(
            _SETTLE_POSTGRESQL,
            {
                "ids": [item.id for item in ordered],
                "deadlines": [item.deadline_at for item in ordered],
                "last_runs": [item.last_run_at for item in ordered],
                "enabled": [item.enabled for item in ordered],
                "reasons": [item.disabled_reason for item in ordered],
                "details": [item.disabled_detail for item in ordered],
                "now": now,
            },
        )
        return
    session.execute(
        update(Schedule),
        [
            {
                "id": item.id,
                "deadline_at": item.deadline_at,
                "last_run_at": item.last_run_at,
                "enabled": item.enabled,
                "disabled_reason": item.disabled_reason,
                "disabled_detail": item.disabled_detail,
                "modified_at": now,
            }
            for item in ordered
        ],
    )


_SETTLE_POSTGRESQL = text(
    """
UPDATE schedules AS s
SET deadline_at = u.deadline, last_run_at = u.last_run, enabled = u.enabled, disabled_reason = u.reason,
    disabled_detail = u.detail, modified_at = :now
FROM unnest(CAST(:ids AS uuid[]), CAST(:deadlines AS timestamptz[]), CAST(:last_runs AS timestamptz[]),
            CAST(:enabled AS boolean[]), CAST(:reasons AS text[]), CAST(:details AS text[]))
     AS u(id, deadline, last_run, enabled, reason, detail)
WHERE s.id = u.id
"""
)


def delete_boefje_schedule(session: Session, organisation: str, schedule_hash: str) -> bool:
    """Delete the organisation's boefje schedule with this hash (its job's); False when there is none."""
    result = session.execute(
        delete(Schedule).where(
            Schedule.scheduler_id == BOEFJE, Schedule.organisation == organisation, Schedule.hash == schedule_hash
        )
    )
    return bool(getattr(result, "rowcount", 0))
