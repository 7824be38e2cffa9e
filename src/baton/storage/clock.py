"""The database's clock, on which every lease (leadership, scheduler ownership, workers) runs.

A lease is a row with a holder, a term and an expiry on the database's clock (`clock_timestamp()`
on PostgreSQL, so replicas' clocks never matter; SQLite is one machine).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, DateTime, func, literal, select
from sqlalchemy.orm import Session

from baton.core.model import utcnow
from baton.storage.engine import on_postgresql
from baton.storage.tables import UTCDateTime


def db_now(session: Session) -> ColumnElement[datetime]:
    if on_postgresql(session):
        return func.clock_timestamp(type_=DateTime(timezone=True))
    return literal(utcnow(), UTCDateTime())


def db_now_once(session: Session) -> ColumnElement[datetime]:
    """The database's clock read once for the whole statement, where a range of an index is bounded by
    it: `clock_timestamp()` is volatile, so a condition on it can never be an index condition (the
    planner reads every entry and filters), while a scalar subquery of it is computed first and
    bounds the index scan like a parameter."""
    if on_postgresql(session):
        return select(func.clock_timestamp(type_=DateTime(timezone=True))).scalar_subquery()
    return db_now(session)


def db_after(session: Session, seconds: float) -> ColumnElement[datetime]:
    if on_postgresql(session):
        return func.clock_timestamp(type_=DateTime(timezone=True)) + timedelta(seconds=seconds)
    return literal(utcnow() + timedelta(seconds=seconds), UTCDateTime())
