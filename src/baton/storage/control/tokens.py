"""API token rows: only a token's SHA-256 is stored."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.errors import ConflictError, NotFoundError
from baton.core.model import utcnow
from baton.storage.tables import ApiToken


def add_token(session: Session, name: str, token_hash: str, scopes: Sequence[str]) -> None:
    if session.get(ApiToken, name) is not None:
        raise ConflictError(f"token '{name}' already exists")
    session.add(ApiToken(name=name, token_hash=token_hash, scopes=sorted(set(scopes)), created_at=utcnow()))
    try:
        session.flush()
    except IntegrityError as exc:
        raise ConflictError(f"token '{name}' already exists") from exc


def list_tokens(session: Session) -> Sequence[ApiToken]:
    return session.scalars(select(ApiToken).order_by(ApiToken.name)).all()


def find_token(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalars(select(ApiToken).where(ApiToken.token_hash == token_hash)).one_or_none()


def delete_token(session: Session, name: str) -> None:
    row = session.get(ApiToken, name)
    if row is None:
        raise NotFoundError(f"token '{name}' not found")
    session.delete(row)
