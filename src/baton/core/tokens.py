"""API tokens' vocabulary: the scopes, what grants which, and how a token is stored (its SHA-256 only).

Scopes: `read` (GET), `pop` (pop, task status changes), `push` (push, events), `admin`
(organisations, plugins, schedulers, report schedules; implies every other scope).
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Sequence

TOKEN_PREFIX = "baton_"


class Scope(enum.StrEnum):
    READ = "read"
    POP = "pop"
    PUSH = "push"
    ADMIN = "admin"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def grants(scopes: Sequence[str], needed: Scope) -> bool:
    return Scope.ADMIN.value in scopes or needed.value in scopes
