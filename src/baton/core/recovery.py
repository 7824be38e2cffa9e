"""Recovery of tasks nobody reports on: which dispatched or running task is handed out again, which
is given up as failed, and why. Pure rules; storage/queues/task_rows.py applies them, the housekeeper runs them.

OpenKAT's runners report a task twice: `running` when one of their workers starts it, and
`completed` or `failed` when it ends, nothing in between however long the scan takes. A silent
*running* task is therefore no sign of a dead runner, and handing it out again would run the scan
twice (mula never does: an unfinished task blocks a new one for as long as it stays unfinished).

- **Dispatched, not started within BATON_TASK_TIMEOUT_SECONDS**: handed out again as a new task, with
  a fresh id (its job's `id` too); the old one is cancelled with a reason naming the new one. A runner
  that still holds the old task cannot start, hand back or finish it any more (each of those is
  refused), so the job runs once, even when the old task was only waiting: OpenKAT's runners pop a
  few tasks ahead of their workers, and a task waits in that local queue for as long as the runs
  ahead of it take. After BATON_TASK_MAX_ATTEMPTS hand-outs the task is failed instead. Tasks a dead
  API process left dispatched (pop receipts it could not settle, core/receipts.py) come back this way.
- **Running with no end after BATON_RUNNING_TASK_LIMIT_SECONDS** (unset: BATON_GRACE_PERIOD_SECONDS;
  0: never): failed with the reason, so that its object is scanned again at its next rescan rather
  than held for ever by a runner that died mid-scan.
- **BATON_REQUEUE_RUNNING_TASKS** (off; the rule before, for runners that report while they run): a
  running task without an update for BATON_TASK_TIMEOUT_SECONDS is handed out again as a dispatched
  one is; the old one is failed.

`attempts` counts the hand-outs recovery made of a job; it moves to the new task, so the sum of all
tasks' attempts grows by one for every recovery (`baton_tasks_recovered_total`).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from baton.core.model import TaskStatus
from baton.core.settings import Settings

# What the reason of a task that recovery replaced starts with (a harness tells such tasks by it).
REPLACED_PREFIX = "replaced by task "
TWIN_QUEUED_REASON = "stuck; superseded by an identical queued task"


class Action(enum.StrEnum):
    REISSUE = "reissue"  # a new task, queued; the old one cancelled (dispatched) or failed (running)
    FAIL = "fail"


@dataclass(frozen=True)
class Verdict:
    action: Action
    attempts: int  # the job's recovered hand-outs after this one
    reason: str  # FAIL: the task's reason; REISSUE: why (the start of both tasks' reasons)


@dataclass(frozen=True)
class RecoveryRule:
    timeout_seconds: float
    max_attempts: int
    running_limit_seconds: float | None  # None: a running task is never failed by time
    requeue_running: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> RecoveryRule:
        recovery = settings.recovery
        limit = recovery.running_task_limit_seconds
        if limit is None:
            limit = settings.grace_period_seconds
        return cls(
            timeout_seconds=recovery.task_timeout_seconds,
            max_attempts=recovery.task_max_attempts,
            running_limit_seconds=limit if limit > 0 else None,
            requeue_running=recovery.requeue_running_tasks,
        )

    def cutoffs(self, now: datetime) -> dict[TaskStatus, datetime]:
        """Per status, the last change before which a task may need recovering (a status absent: none
        does). Storage reads only those; `verdict` decides each."""
        found = {TaskStatus.DISPATCHED: now - timedelta(seconds=self.timeout_seconds)}
        running = [self.running_limit_seconds] if self.running_limit_seconds is not None else []
        if self.requeue_running:
            running.append(self.timeout_seconds)
        if running:
            found[TaskStatus.RUNNING] = now - timedelta(seconds=min(running))
        return found

    def verdict(self, status: TaskStatus, silent_seconds: float, attempts: int) -> Verdict | None:
        """What happens to a task in `status` whose last change was `silent_seconds` ago and whose job
        recovery handed out `attempts` times before; None: it is left alone."""
        if status is TaskStatus.DISPATCHED:
            if silent_seconds >= self.timeout_seconds:
                return self._hand_out_again(attempts, "not started within {timeout} s of its hand-out")
            return None
        if status is not TaskStatus.RUNNING:
            return None
        if self.running_limit_seconds is not None and silent_seconds >= self.running_limit_seconds:
            reason = (
                f"running for more than {self.running_limit_seconds:g} s without an end reported "
                "(BATON_RUNNING_TASK_LIMIT_SECONDS): given up, so that its object is scanned again"
            )
            return Verdict(Action.FAIL, attempts + 1, reason)
        if self.requeue_running and silent_seconds >= self.timeout_seconds:
            return self._hand_out_again(attempts, "no update for {timeout} s while running")
        return None

    def _hand_out_again(self, attempts: int, why: str) -> Verdict:
        attempts += 1
        if attempts >= self.max_attempts:
            return Verdict(Action.FAIL, attempts, f"no progress reported after {attempts} attempts (status timeout)")
        why = why.format(timeout=f"{self.timeout_seconds:g}") + " (BATON_TASK_TIMEOUT_SECONDS)"
        return Verdict(Action.REISSUE, attempts, why)


def replaced_status(status: TaskStatus) -> TaskStatus:
    """What a task handed out again becomes: a dispatched one never ran (cancelled), a running one is
    given up (failed); either way no status may follow, so its runner's late reports are refused."""
    return TaskStatus.CANCELLED if status is TaskStatus.DISPATCHED else TaskStatus.FAILED


def replaced_reason(new_id: uuid.UUID, why: str) -> str:
    return f"{REPLACED_PREFIX}{new_id}: {why}"


def replacement_reason(old_id: uuid.UUID, attempts: int) -> str:
    return f"handed out again after a status timeout (attempt {attempts}; was task {old_id})"


def reissued_data(data: Any, old_id: uuid.UUID, new_id: uuid.UUID) -> Any:
    """The new task's data: an OpenKAT job carries its task's id (`data.id`), which becomes the new
    one's; any other data is kept as it is."""
    if isinstance(data, dict) and data.get("id") == str(old_id):
        return {**data, "id": str(new_id)}
    return data
