"""API tokens as `baton token` makes, lists and revokes them: bearer tokens with scopes; only their
SHA-256 is stored. The API's look-up is service/token_cache.py; the scopes are core's (core/tokens.py)."""

from __future__ import annotations

from collections.abc import Sequence

from baton.core.tokens import Scope, grants, hash_token, new_token
from baton.storage.control import tokens as rows
from baton.storage.engine import Session

__all__ = ["Scope", "create_token", "grants", "list_tokens", "revoke_token"]


def create_token(session: Session, name: str, scopes: Sequence[Scope]) -> str:
    """Store a new token and return it; it cannot be shown again."""
    token = new_token()
    rows.add_token(session, name, hash_token(token), [scope.value for scope in scopes])
    return token


list_tokens = rows.list_tokens
revoke_token = rows.delete_token
