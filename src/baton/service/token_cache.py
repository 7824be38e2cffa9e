"""Looking up the API's bearer tokens, remembered for a short while so a pop costs no extra query.

A revoked token therefore keeps working for up to CACHE_SECONDS on replicas that saw it.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from baton.core.tokens import hash_token

CACHE_SECONDS = 30.0


class TokenLookup(Protocol):
    """The stored tokens (storage/ports/tokens.py)."""

    def find(self, token_hash: str) -> tuple[str, list[str]] | None: ...


class TokenCache:
    def __init__(self, tokens: TokenLookup, ttl: float = CACHE_SECONDS) -> None:
        self.tokens = tokens
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

    def lookup(self, token: str) -> tuple[str, list[str]] | None:
        """The token's (name, scopes), from the cache or the database (this blocks); None: unknown."""
        found = self.cached(token)
        if found is not None:
            return found
        digest = hash_token(token)
        now = time.monotonic()
        found = self.tokens.find(digest)
        if found is None:
            return None  # not cached: a token created a moment later must work at once
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (now, found)
        return found
