"""API tokens: bearer tokens with scopes; only their SHA-256 is stored.

Scopes: `read` (GET), `pop` (pop, task status changes), `push` (push, events), `admin`
(organisations, plugins, schedulers, report schedules; implies every other scope).
"""

from __future__ import annotations

import enum
import hashlib
import secrets
import threading
import time
from collections.abc import Sequence

from baton.storage.control import tokens as rows
from baton.storage.engine import Session

TOKEN_PREFIX = "baton_"
CACHE_SECONDS = 30.0


class Scope(enum.StrEnum):
    READ = "read"
    POP = "pop"
    PUSH = "push"
    ADMIN = "admin"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, name: str, scopes: Sequence[Scope]) -> str:
    """Store a new token and return it; it cannot be shown again."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    rows.add_token(session, name, hash_token(token), [scope.value for scope in scopes])
    return token


list_tokens = rows.list_tokens
revoke_token = rows.delete_token


def grants(scopes: Sequence[str], needed: Scope) -> bool:
    return Scope.ADMIN.value in scopes or needed.value in scopes


class TokenCache:
    """Remembers looked-up tokens for a short while so a pop costs no extra query.

    A revoked token therefore keeps working for up to CACHE_SECONDS on replicas that saw it.
    """

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, tuple[str, list[str]]]] = {}
        self._lock = threading.Lock()

    def cached(self, token: str) -> tuple[str, list[str]] | None:
        """The token's (name, scopes) if looked up recently; None means: ask the database."""
        with self._lock:
            entry = self._entries.get(hash_token(token))
        if entry is not None and time.monotonic() - entry[0] < self.ttl:
            return entry[1]
        return None

    def lookup(self, session: Session, token: str) -> tuple[str, list[str]] | None:
        found = self.cached(token)
        if found is not None:
            return found
        digest = hash_token(token)
        now = time.monotonic()
        row = rows.find_token(session, digest)
        if row is None:
            return None  # not cached: a token created a moment later must work at once
        found = (row.name, list(row.scopes))
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (now, found)
        return found
