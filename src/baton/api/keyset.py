"""The paging parameters of the listings (`GET /organisations`, `/schedulers`, `/queues`) and their
`Link: <...>; rel="next"` header (RFC 8288). The rules (cursors, searches): `baton.core.listing`.

The body keeps each listing's shape (a JSON array); the next page is in the header only, so clients
that read the array go on working, and read the first `limit` (default 100) entries."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request, Response

from baton.api.errors import invalid
from baton.core.listing import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_CURSOR_LENGTH,
    MAX_LIMIT,
    SEARCH_PATTERN,
    InvalidListingError,
    Listing,
    PageRequest,
)

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Rows per page (at most {MAX_LIMIT}).")]
Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_CURSOR_LENGTH,
        pattern=CURSOR_PATTERN,
        description='Where the page starts: the cursor of the `Link: <...>; rel="next"` header of the previous page.',
    ),
]
OrganisationSearch = Annotated[
    str | None,
    Query(max_length=64, pattern=SEARCH_PATTERN, description="Only this organisation's rows (its exact id)."),
]
PrefixSearch = Annotated[
    str | None,
    Query(max_length=64, pattern=SEARCH_PATTERN, description="Only organisations whose id starts with this text."),
]


def page_request(
    listing: Listing, limit: int, cursor: str | None, organisation: str | None = None, q: str | None = None
) -> PageRequest:
    """The checked page request; a refused parameter answers 422 naming it."""
    try:
        return PageRequest.of(listing, limit=limit, cursor=cursor, organisation=organisation, q=q)
    except InvalidListingError as exc:
        raise invalid(("query", exc.field), exc.reason) from None


def link_next(request: Request, response: Response, next_cursor: str | None) -> None:
    """`Link: <this address with the next cursor>; rel="next"` when there is a next page."""
    if next_cursor is not None:
        url = request.url.remove_query_params("cursor").include_query_params(cursor=next_cursor)
        response.headers["Link"] = f'<{url}>; rel="next"'


__all__ = ["DEFAULT_LIMIT", "Cursor", "Limit", "OrganisationSearch", "PrefixSearch", "link_next", "page_request"]
