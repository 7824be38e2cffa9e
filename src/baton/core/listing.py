"""Keyset pages of the listings (`GET /organisations`, `/schedulers`, `/queues`, the status page's
views): the rules, without a database.

A page is the first `limit` rows, in a fixed order, after a position; the next page starts after the
last row shown. The position travels as an opaque cursor: URL-safe base64 (no padding) of a JSON
array `[version, listing, *key]`. A cursor names its listing, so one listing's cursor is refused by
another; anything that is not a cursor this release wrote (bad base64, bad JSON, another version, the
wrong number of key parts, parts that are not short strings) is refused with a message naming the
field. Rows are ordered by their key compared byte by byte (SQLite's BINARY, PostgreSQL's "C"
collation), so a page does not depend on the database's locale.

A search is by organisation: `organisation` equal to an id, or `q` a prefix of it. Identifiers hold
only ASCII letters, digits, '_', '.' and '-' (`model.OrganisationId`), all below U+007F, so the ids
with prefix `q` are exactly those in the byte range [q, q + U+007F): one range of an index.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
CURSOR_VERSION = 1
MAX_CURSOR_LENGTH = 512
MAX_KEY_PART = 128  # a scheduler id: 'normalizer-' and a 64-character organisation fit
SEARCH_PATTERN = r"^[A-Za-z0-9_.\-]*$"
ID_CHARACTERS = re.compile(SEARCH_PATTERN)
CURSOR_PATTERN = r"^[A-Za-z0-9_\-]+$"  # URL-safe base64 without padding
PREFIX_END = "\x7f"  # above every character an identifier may hold

T = TypeVar("T")
Listing = Literal["organisations", "schedulers", "queues"]
# The key each listing is ordered by: organisations by id; schedulers and queues by organisation, then id.
KEY_PARTS: dict[str, int] = {"organisations": 1, "schedulers": 2, "queues": 2}


class InvalidListingError(ValueError):
    """A listing parameter the rules refuse; `field` names it (the API answers 422 naming it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


def encode_cursor(listing: str, key: tuple[str, ...]) -> str:
    """The cursor of the position after the row whose ordering key is `key`."""
    if len(key) != KEY_PARTS[listing]:
        raise ValueError(f"a {listing} cursor has {KEY_PARTS[listing]} key parts, not {len(key)}")
    text = json.dumps([CURSOR_VERSION, listing, *key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(listing: str, cursor: str) -> tuple[str, ...]:
    """The key a cursor of `listing` carries; InvalidListingError('cursor', ...) for anything else."""
    if not cursor or len(cursor) > MAX_CURSOR_LENGTH:
        raise InvalidListingError("cursor", f"not a cursor (1 to {MAX_CURSOR_LENGTH} characters)")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        document = json.loads(raw.decode())
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidListingError("cursor", "not a cursor: give the one a page's Link header names") from None
    if not isinstance(document, list) or len(document) < 2 or document[0] != CURSOR_VERSION:
        raise InvalidListingError("cursor", "not a cursor of this release: start again from the first page")
    if document[1] != listing:
        raise InvalidListingError("cursor", f"a cursor of another listing ({str(document[1])[:32]!r}), not {listing}")
    key = document[2:]
    if len(key) != KEY_PARTS[listing] or not all(valid_key_part(part) for part in key):
        raise InvalidListingError("cursor", "not a cursor: give the one a page's Link header names")
    return tuple(key)


def valid_key_part(part: object) -> bool:
    return isinstance(part, str) and 0 < len(part) <= MAX_KEY_PART and ID_CHARACTERS.match(part) is not None


def prefix_range(prefix: str) -> tuple[str, str]:
    """The byte range of the identifiers that start with `prefix`: [low, high)."""
    return prefix, prefix + PREFIX_END


def check_search(field: str, value: str | None) -> str | None:
    """An organisation id or prefix: only the characters an identifier may hold."""
    if value is not None and (len(value) > 64 or not ID_CHARACTERS.match(value)):
        raise InvalidListingError(field, "letters, digits, '_', '.' and '-' only, at most 64 characters")
    return value


@dataclass(frozen=True)
class PageRequest:
    """One page of a listing: up to `limit` rows after `after` (None: from the start), or the last
    `limit` rows before `before` (the status page's "previous"), of the organisation `organisation`
    and/or of the organisations whose id starts with `prefix`."""

    listing: Listing
    limit: int = DEFAULT_LIMIT
    after: tuple[str, ...] | None = None
    organisation: str | None = None
    prefix: str | None = None
    before: tuple[str, ...] | None = None

    @property
    def backwards(self) -> bool:
        """Read in reverse order (rows before `before`, the nearest first), shown in order."""
        return self.before is not None

    @classmethod
    def of(
        cls,
        listing: Listing,
        *,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        organisation: str | None = None,
        q: str | None = None,
        before: str | None = None,
    ) -> PageRequest:
        """Checked parameters as the API takes them; InvalidListingError names the one refused."""
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidListingError("limit", f"between 1 and {MAX_LIMIT}")
        if cursor is not None and before is not None:
            raise InvalidListingError("before", "a page starts after a cursor or ends before one, not both")
        after = decode_cursor(listing, cursor) if cursor is not None else None
        ending = decode_cursor(listing, before) if before is not None else None
        searched = check_search("organisation", organisation), check_search("q", q) or None
        return cls(listing, limit, after, *searched, before=ending)

    def cursor_at(self, key: tuple[str, ...]) -> str:
        return encode_cursor(self.listing, key)


@dataclass(frozen=True)
class Page(Generic[T]):
    """The rows of a page, the cursor of the next page (None: this is the last one) and the cursor
    that ends the previous page (a `before`; None: this is the first page)."""

    rows: list[T]
    next_cursor: str | None
    previous_cursor: str | None = None


def cut_page(request: PageRequest, rows: list[T], key_of: Callable[[T], tuple[str, ...]]) -> Page[T]:
    """`rows`: up to `limit + 1` rows as read (in order; backwards, the nearest first); one more than
    `limit` means there are more in the direction read. `key_of(row)`: a row's ordering key.

    Forwards, the next page starts after the last row shown, and a page that starts after a cursor has
    a previous one, ending before its first row. Backwards, the mirror image: a page read before a
    cursor has a next one (the page it came from)."""
    more = len(rows) > request.limit
    shown = rows[: request.limit]
    if request.backwards:
        shown.reverse()
    if not shown:
        return Page(shown, None, None)
    following = more if not request.backwards else True
    preceding = more if request.backwards else request.after is not None
    first, last = key_of(shown[0]), key_of(shown[-1])
    return Page(
        shown,
        request.cursor_at(last) if following else None,
        request.cursor_at(first) if preceding else None,
    )
