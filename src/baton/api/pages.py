"""Pages in OpenKAT's shape: `{count, next, previous, results}`, the neighbours as absolute URLs."""

from __future__ import annotations

from typing import Any

from fastapi import Request


def page(request: Request, count: int, limit: int, offset: int, results: list[Any]) -> dict[str, Any]:
    """OpenKAT's rule: `next` while offset + limit <= count, `previous` while offset - limit >= 0."""
    url = request.url.remove_query_params(["limit", "offset"])
    following = url.include_query_params(limit=limit, offset=offset + limit) if offset + limit <= count else None
    preceding = url.include_query_params(limit=limit, offset=offset - limit) if offset - limit >= 0 else None
    return {
        "count": count,
        "next": str(following) if following is not None else None,
        "previous": str(preceding) if preceding is not None else None,
        "results": results,
    }
