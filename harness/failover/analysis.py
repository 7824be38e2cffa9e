"""One scenario's numbers, from the clients' records, the probe's and the database's."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import psycopg

from harness.failover.load import Answer, ProbeRecord

WARNING = re.compile(r"\[warn(ing)?\s*\]|\bWARNING\b|\"level\": ?\"warning\"")
TRACEBACK = "Traceback (most recent call last)"
RECOVERY = re.compile(r"database available again")


def database_outage(probe: ProbeRecord, fault_at: float) -> dict[str, float | None]:
    """When the database stopped taking writes after the fault, and when it took them again after
    its last failed write (a restart may be followed by a failover: two gaps, one outage)."""
    after = [(at, ok) for at, ok in probe.writes if at >= fault_at]
    failures = [at for at, ok in after if not ok]
    if not failures:
        return {"last_write": None, "writes_back": None, "seconds": 0.0}
    last_write = max((at for at, ok in probe.writes if ok and at < failures[0]), default=fault_at)
    writes_back = next((at for at, ok in after if ok and at > failures[-1]), None)
    return {
        "last_write": last_write,
        "writes_back": writes_back,
        "seconds": None if writes_back is None else writes_back - last_write,
    }


def replica_outage(answers: list[Answer], fault_at: float, writes_back: float | None) -> dict[str, Any]:
    """A replica's outage: from its first failed answer after the fault to the end of its first
    successful one that started after its last failure."""
    mine = [answer for answer in answers if answer.ended >= fault_at]
    failures = [answer for answer in mine if answer.failed]
    errors = {
        "error_answers": len(failures),
        "max_error_seconds": round(max((a.ended - a.started for a in failures), default=0.0), 2),
        "error_statuses": dict(Counter(str(a.status) for a in failures)),
    }
    if not failures:
        return {"outage_seconds": 0.0, "serving_after_writes_seconds": None, **errors}
    last_failure = max(failures, key=lambda a: a.started)
    recovered = min((a.ended for a in mine if not a.failed and a.started >= last_failure.started), default=None)
    if recovered is None:
        return {"outage_seconds": None, "serving_after_writes_seconds": None, **errors}
    first_failure = min(a.started for a in failures)
    return {
        "outage_seconds": round(recovered - first_failure, 2),
        "serving_after_writes_seconds": None if writes_back is None else round(recovered - writes_back, 2),
        **errors,
    }


def director_back(probe: ProbeRecord, writes_back: float | None) -> dict[str, Any]:
    """The director's first lease renewal (the database's clock) after the database took writes."""
    if writes_back is None:
        return {"renewed_after_writes_seconds": None}
    after = [(at, term) for at, term in probe.renewals if at >= writes_back]
    before = [term for at, term in probe.renewals if at < writes_back]
    if not after:
        return {"renewed_after_writes_seconds": None}
    return {
        "renewed_after_writes_seconds": round(after[0][0] - writes_back, 2),
        "term_before": before[-1] if before else None,
        "term_after": after[0][1],
    }


def task_audit(answers: list[Answer], conninfo: str, queue: str) -> dict[str, int]:
    """Lost: pushes answered 201 whose task is not in the database. Duplicated: a task handed to
    two pops, or one push stored twice. Stranded: tasks `dispatched` that no client received, and the
    pops (receipts) they came from, none of whose tasks reached a client. Handed back: tasks of
    unanswered pops that Baton put back in their queue (their receipt settled)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id::text, status, data->>'m', receipt::text, reason FROM tasks WHERE scheduler_id = %s", (queue,)
        ).fetchall()
    stored = {task_id: status for task_id, status, *_ in rows}
    markers = Counter(marker for _, _, marker, *_ in rows)
    receipts: dict[str, set[str]] = {}
    for task_id, status, _, receipt, _ in rows:
        if status == "dispatched" and receipt is not None:
            receipts.setdefault(receipt, set()).add(task_id)
    acknowledged = {a.task for a in answers if a.op == "push" and a.status == 201 and a.task}
    received = Counter(a.task for a in answers if a.op == "pop" and a.status == 200 and a.task)
    return {
        "pushed_acknowledged": len(acknowledged),
        "push_errors": sum(1 for a in answers if a.op == "push" and a.failed),
        "popped": sum(received.values()),
        "lost": len(acknowledged - stored.keys()),
        "duplicated_handouts": sum(1 for count in received.values() if count > 1),
        "duplicated_pushes": sum(1 for count in markers.values() if count > 1),
        "stranded": sum(1 for task_id, status in stored.items() if status == "dispatched" and task_id not in received),
        "stranded_pops": sum(1 for tasks in receipts.values() if not tasks & received.keys()),
        "handed_back": sum(1 for *_, reason in rows if (reason or "").startswith("handed back")),
        "tasks_in_database": len(stored),
    }


def log_audit(lines: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "tracebacks": sum(1 for line in text if TRACEBACK in line),
            "warnings": sum(1 for line in text if WARNING.search(line)),
            "recoveries": sum(1 for line in text if RECOVERY.search(line)),
            "warning_lines": sorted({_shape(line) for line in text if WARNING.search(line)})[:8],
        }
        for name, text in lines.items()
    }


def _shape(line: str) -> str:
    """A warning line without its timestamp and numbers: the same warning repeated counts once."""
    line = re.sub(r"^\S+\s+", "", line.strip())  # the timestamp
    line = re.sub(r"\s*request_id=\S+|\s*at 0x[0-9a-f]+", "", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)[:160]
