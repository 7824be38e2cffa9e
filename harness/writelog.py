"""An audit of every write that touches a scheduler (PostgreSQL only), for the lease and fencing
experiments: triggers log each update of a `schedulers` row, each task inserted and each inbox
event consumed, with the claim the writing transaction declared (`baton.claim`, set by the
fencing check).

`analyse` then answers the questions the issue asks, from the log rather than from assumptions:
- superseded writes: a write tagged with a claim whose term is older than a term the row already
  had (a scheduler acting after it was taken over);
- orphan marks: a row set to stopped/failed while nobody owned it, or by a claim that was not the
  row's owner at that moment.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg

from baton.storage.urls import libpq_conninfo

INSTALL = """
CREATE TABLE IF NOT EXISTS scheduler_writes (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind text NOT NULL,
    scheduler_id text NOT NULL,
    claim text,
    old_owner text, old_term bigint, old_state text,
    new_owner text, new_term bigint, new_state text
);
CREATE OR REPLACE FUNCTION baton_log_scheduler_update() RETURNS trigger AS $$
BEGIN
    INSERT INTO scheduler_writes (kind, scheduler_id, claim, old_owner, old_term, old_state,
                                  new_owner, new_term, new_state)
    VALUES ('row', NEW.id, nullif(current_setting('baton.claim', true), ''), OLD.owner, OLD.term,
            OLD.state, NEW.owner, NEW.term, NEW.state);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION baton_log_task_insert() RETURNS trigger AS $$
BEGIN
    INSERT INTO scheduler_writes (kind, scheduler_id, claim)
    VALUES ('task', NEW.scheduler_id, nullif(current_setting('baton.claim', true), ''));
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS baton_scheduler_writes ON schedulers;
CREATE TRIGGER baton_scheduler_writes AFTER UPDATE ON schedulers
    FOR EACH ROW EXECUTE FUNCTION baton_log_scheduler_update();
CREATE OR REPLACE FUNCTION baton_log_event_consumed() RETURNS trigger AS $$
BEGIN
    INSERT INTO scheduler_writes (kind, scheduler_id, claim)
    VALUES ('event', NEW.scheduler_id, nullif(current_setting('baton.claim', true), ''));
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS baton_event_writes ON events;
CREATE TRIGGER baton_event_writes AFTER UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION baton_log_event_consumed();
DROP TRIGGER IF EXISTS baton_task_writes ON tasks;
CREATE TRIGGER baton_task_writes AFTER INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION baton_log_task_insert();
"""


def install(database_url: str) -> None:
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        conn.execute(INSTALL)


UNINSTALL = """
DROP TRIGGER IF EXISTS baton_scheduler_writes ON schedulers;
DROP TRIGGER IF EXISTS baton_event_writes ON events;
DROP TRIGGER IF EXISTS baton_task_writes ON tasks;
DROP TABLE IF EXISTS scheduler_writes;
"""


def uninstall(database_url: str) -> None:
    """The database as Baton made it again: without the audit's triggers (they cost every write)."""
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        conn.execute(UNINSTALL)


@dataclass
class WriteAudit:
    writes: int = 0
    claims: int = 0  # row writes that made a new term
    superseded: list[dict[str, Any]] = field(default_factory=list)
    orphan_marks: list[dict[str, Any]] = field(default_factory=list)
    writes_by_claim: dict[str, int] = field(default_factory=dict)

    @property
    def tagged_writes(self) -> int:
        """Writes a scheduler made under a claim it declared (tasks, consumed events, its row)."""
        return sum(self.writes_by_claim.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "writes": self.writes,
            "scheduler_writes": self.tagged_writes,
            "claims": self.claims,
            "superseded_writes": len(self.superseded),
            "orphan_marks": len(self.orphan_marks),
            "examples": (self.superseded + self.orphan_marks)[:5],
        }


def _claim_term(claim: str | None) -> int | None:
    if not claim or "/" not in claim:
        return None
    return int(claim.rsplit("/", 1)[1])


def analyse(database_url: str) -> WriteAudit:
    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        rows = conn.execute(
            "SELECT seq, at, kind, scheduler_id, claim, old_owner, old_term, old_state, new_owner, new_term, "
            "new_state FROM scheduler_writes ORDER BY at, seq"
        ).fetchall()
    audit = WriteAudit(writes=len(rows))
    newest_term: dict[str, int] = defaultdict(int)
    per_claim: dict[str, int] = defaultdict(int)
    for seq, at, kind, scheduler_id, claim, old_owner, old_term, old_state, _new_owner, new_term, new_state in rows:
        entry = {"seq": seq, "at": at.isoformat(), "kind": kind, "scheduler": scheduler_id, "claim": claim}
        claimed_term = _claim_term(claim)
        if claim:
            per_claim[claim] += 1
        if claimed_term is not None and claimed_term < newest_term[scheduler_id]:
            audit.superseded.append({**entry, "newest_term": newest_term[scheduler_id]})
        if kind == "row":
            if new_term is not None and old_term is not None and new_term > old_term:
                audit.claims += 1
            newest_term[scheduler_id] = max(newest_term[scheduler_id], int(new_term or 0))
            if new_state in ("stopped", "failed") and new_state != old_state:
                writer_owner = claim.rsplit("/", 1)[0] if claim else old_owner
                if old_owner is None or writer_owner != old_owner:
                    audit.orphan_marks.append({**entry, "old_owner": old_owner, "state": new_state})
    audit.writes_by_claim = dict(per_claim)
    return audit
