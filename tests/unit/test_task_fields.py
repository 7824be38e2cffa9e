"""A task's columns are listed once (core.queueing.TaskRow): what the statements return, what the answers
carry and what the documented schema describes all follow it."""

from __future__ import annotations

from baton.api.schemas import TaskOut
from baton.core.queueing import TASK_FIELDS
from baton.storage.queues.statements import task_columns


def test_every_statement_returns_the_task_fields_in_order() -> None:
    assert tuple(column.key for column in task_columns()) == TASK_FIELDS
    assert tuple(column.key for column in task_columns(raw_data=True)) == TASK_FIELDS


def test_the_documented_task_has_every_field_and_the_queue() -> None:
    assert set(TaskOut.model_fields) == {*TASK_FIELDS, "queue"}
