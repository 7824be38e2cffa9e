"""Per-call values for load-generator clients that must name a different task each call (PATCHes of
distinct tasks): module-level functions, cheap to import, picklable as functools.partial objects for the
load generator's spawned processes (bench.loadgen imports nothing heavier to call them)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime


def task_id(batch: int, client: int, n: int) -> uuid.UUID:
    """The n-th task of one client in one measurement: what its SQL creates as
    lpad(hex(batch), 16) || lpad(hex(client), 8) || lpad(hex(n), 8)."""
    return uuid.UUID(int=(batch << 64) | (client << 32) | n)


def task_path(batch: int, client: int, n: int) -> str:
    return f"/tasks/{task_id(batch, client, n)}"


def now(_n: int) -> datetime:
    return datetime.now(UTC)
