"""`baton import-mula`'s rules without a database (core/mula.py): which schemas are mula's at a revision
import-mula reads, what each of mula's rows becomes in Baton, which are left out and why."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from baton.core.mula import (
    BAD_ORGANISATION,
    LONG_CRON,
    NO_OBJECT,
    NO_ORGANISATION,
    PENDING_REASON,
    PRIORITY_OF_NULL,
    UNKNOWN_STATUS,
    UNKNOWN_TYPE,
    ImportedRun,
    ImportedSchedule,
    ImportedTask,
    MulaRun,
    MulaSchedule,
    MulaTask,
    NotMulaError,
    SchemaFacts,
    Skipped,
    foreign_tables,
    imported_run,
    imported_schedule,
    imported_task,
    organisation_of,
    organisation_refusal,
    queue_of,
    read_layout,
    schedule_type,
)

NOW = datetime(2026, 1, 31, 10, 0, tzinfo=UTC)
ORGS = {"acme", "beta", "ωmega"}
LABELS = ("PENDING", "QUEUED", "DISPATCHED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
SCHEDULE_NAMES = (
    "id",
    "scheduler_id",
    "hash",
    "data",
    "enabled",
    "schedule",
    "deadline_at",
    "created_at",
    "modified_at",
)
SCHEDULES = dict.fromkeys(SCHEDULE_NAMES, "x")
TASKS = {
    **{name: "x" for name in ("id", "scheduler_id", "schedule_id", "type", "hash", "priority", "data")},
    "status": "taskstatus",
    "created_at": "x",
    "modified_at": "x",
}


def facts(revision: str | None, *, organisation: bool = True, **changes: object) -> SchemaFacts:
    extra = {"organisation": "character varying"} if organisation else {}
    tables = {"schedules": {**SCHEDULES, **extra}, "tasks": {**TASKS, **extra}, "alembic_version": {"version_num": "x"}}
    return SchemaFacts(
        **{"where": "schema public of here", "tables": tables, "status_labels": LABELS, "revision": revision, **changes}  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(("revision", "has_organisation"), [("0008", False), ("0009", True), ("0010", True)])
def test_mulas_revisions_0008_to_0010_are_read(revision: str, has_organisation: bool) -> None:
    layout = read_layout(facts(revision, organisation=has_organisation))
    assert layout is not None and layout.revision == revision and layout.has_organisation is has_organisation


def test_a_schema_without_mulas_tables_is_no_ones() -> None:
    assert read_layout(SchemaFacts("schema public of here", {})) is None


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (facts("0007", organisation=False), "older than import-mula reads"),
        (facts("0011"), "revision 0011, which is not one of mula's"),
        (facts("0010", organisation=False), "schedules has no column organisation"),
        (facts("0008", tables={"tasks": TASKS, "alembic_version": {}}), "it has no schedules table"),
        (facts(None, tables={"tasks": TASKS, "schedules": SCHEDULES}), "but no alembic_version"),
        (facts(None), "alembic_version is empty"),
        (facts("0010", status_labels=("QUEUED",)), "not mula's taskstatus enum"),
        (facts("0014", tables={"tasks": {"seq": "bigint"}, "alembic_version": {}}), "holds Baton's own tables"),
    ],
)
def test_anything_else_is_refused_saying_what_was_found(given: SchemaFacts, said: str) -> None:
    with pytest.raises(NotMulaError) as refused:
        read_layout(given)
    assert said in str(refused.value) and str(refused.value).startswith("schema public of here")
    assert "\n" not in str(refused.value)


def test_migrations_refuse_a_schema_that_holds_mulas_tables_or_another_tasks_table() -> None:
    mula = foreign_tables(facts("0010"))
    assert mula is not None and "mula (alembic revision 0010)" in mula
    assert "BATON_DATABASE_SCHEMA" in mula and "baton import-mula" in mula
    other = foreign_tables(SchemaFacts("schema public of here", {"tasks": {"id": "integer"}}))
    assert other is not None and "not Baton's" in other and "import-mula" not in other
    assert foreign_tables(SchemaFacts("here", {"tasks": {"seq": "bigint"}})) is None  # Baton's own
    assert foreign_tables(SchemaFacts("here", {})) is None


def mula_task(**changes: object) -> MulaTask:
    fields: dict[str, object] = {
        "id": uuid.uuid4(),
        "scheduler_id": "boefje",
        "organisation": "acme",
        "type": "boefje",
        "status": "QUEUED",
        "priority": 1700000000,
        "hash": "0" * 32,
        "schedule_id": uuid.uuid4(),
        "data": '{"id": "x"}',
        "created_at": NOW,
        "modified_at": NOW + timedelta(minutes=1),
    }
    return MulaTask(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "becomes"),
    [
        ("QUEUED", "queued"),
        ("DISPATCHED", "dispatched"),
        ("RUNNING", "running"),
        ("COMPLETED", "completed"),
        ("FAILED", "failed"),
        ("CANCELLED", "cancelled"),
        ("PENDING", "cancelled"),
    ],
)
def test_statuses_are_kept_pending_becomes_cancelled(status: str, becomes: str) -> None:
    task = imported_task(mula_task(status=status), ORGS)
    assert isinstance(task, ImportedTask) and task.status == becomes
    assert task.reason == (PENDING_REASON if status == "PENDING" else None)


def test_a_task_keeps_every_field_in_the_queue_of_its_type_and_organisation() -> None:
    row = mula_task(organisation="ωmega")
    task = imported_task(row, ORGS)
    assert isinstance(task, ImportedTask)
    assert task.id == row.id and task.queue == "boefje-ωmega" == queue_of("boefje", "ωmega")
    assert (task.organisation, task.type, task.priority, task.hash, task.data) == (
        "ωmega",
        "boefje",
        row.priority,
        row.hash,
        row.data,
    )
    assert task.schedule_id == str(row.schedule_id)
    assert (task.created_at, task.modified_at) == (row.created_at, row.modified_at)


def test_a_task_without_a_priority_pops_last_as_in_mula() -> None:
    task = imported_task(mula_task(priority=None), ORGS)
    assert isinstance(task, ImportedTask) and task.priority == PRIORITY_OF_NULL


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"type": "bit"}, UNKNOWN_TYPE),
        ({"status": "LOST"}, UNKNOWN_STATUS),
        ({"organisation": None, "scheduler_id": "boefje"}, NO_ORGANISATION),
        ({"organisation": "bad org"}, BAD_ORGANISATION),
        ({"organisation": "x" * 65}, BAD_ORGANISATION),
        ({"organisation": "gone"}, BAD_ORGANISATION),  # not among the organisations Baton holds
    ],
)
def test_rows_baton_cannot_hold_are_skipped_with_a_reason(changes: dict[str, object], reason: str) -> None:
    assert imported_task(mula_task(**changes), ORGS) == Skipped(reason)


def test_at_revision_0008_the_organisation_comes_from_data_else_the_scheduler_id() -> None:
    assert organisation_of("acme", "boefje-other") == "acme"
    assert organisation_of(None, "boefje-acme") == "acme"
    assert organisation_of(None, "normalizer-my-org.nl") == "my-org.nl"
    assert organisation_of(None, "boefje") is None and organisation_of(None, "bit-acme") is None
    task = imported_task(mula_task(organisation=None, scheduler_id="report-beta", type="report"), ORGS)
    assert isinstance(task, ImportedTask) and task.queue == "report-beta"


def test_organisation_codes_as_openkat_makes_them() -> None:
    assert organisation_refusal("acme") is None and organisation_refusal("ωmega-2_x.nl") is None
    assert organisation_refusal("") == NO_ORGANISATION and organisation_refusal(None) == NO_ORGANISATION
    assert organisation_refusal(".dot") == BAD_ORGANISATION


def mula_schedule(**changes: object) -> MulaSchedule:
    fields: dict[str, object] = {
        "id": uuid.uuid4(),
        "scheduler_id": "boefje",
        "organisation": "acme",
        "hash": "1" * 32,
        "data": "{}",
        "enabled": False,
        "schedule": "0 6 * * *",
        "deadline_at": NOW,
        "created_at": NOW,
        "modified_at": NOW,
    }
    return MulaSchedule(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_schedule_keeps_its_fields_and_is_named_by_its_type() -> None:
    row = mula_schedule(scheduler_id="report-beta", organisation=None)
    schedule = imported_schedule(row, ORGS)
    assert isinstance(schedule, ImportedSchedule)
    assert (schedule.id, schedule.scheduler_id, schedule.organisation) == (row.id, "report", "beta")
    assert (schedule.enabled, schedule.schedule, schedule.deadline_at, schedule.hash) == (
        False,
        "0 6 * * *",
        NOW,
        row.hash,
    )
    assert schedule_type("normalizer") == "normalizer" and schedule_type("bit-acme") is None
    assert imported_schedule(mula_schedule(scheduler_id="bit"), ORGS) == Skipped(UNKNOWN_TYPE)
    assert imported_schedule(mula_schedule(schedule="*" * 129), ORGS) == Skipped(LONG_CRON)


def test_the_grace_period_is_remembered_from_the_latest_tasks_modified_at() -> None:
    row = MulaRun("acme", "boefje", "dns-records", "Hostname|internet|example.com", NOW)
    assert imported_run(row, ORGS) == ImportedRun("acme", "dns-records", "Hostname|internet|example.com", NOW)
    assert imported_run(MulaRun(None, "boefje-beta", "dns", "Hostname|x", NOW), ORGS) == ImportedRun(
        "beta", "dns", "Hostname|x", NOW
    )
    assert imported_run(MulaRun("acme", "boefje", "kat-finding-types", None, NOW), ORGS) == Skipped(NO_OBJECT)
    assert imported_run(MulaRun("bad org", "boefje", "dns", "x", NOW), ORGS) == Skipped(BAD_ORGANISATION)
