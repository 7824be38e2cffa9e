"""API tokens by the SHA-256 of the token (service/token_cache.py's port)."""

from __future__ import annotations

from baton.storage.control import tokens as rows
from baton.storage.engine import Store


class TokenRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, token_hash: str) -> tuple[str, list[str]] | None:
        """The token's (name, scopes); None: no such token."""
        with self.store.session() as session:
            row = rows.find_token(session, token_hash)
            return None if row is None else (row.name, list(row.scopes))
