"""Octopoes: the objects a boefje may scan, and whether an object still exists at a scan level.

Paths and parameters as octopoes/octopoes/api/router.py and bulk_router.py serve them and
mula/scheduler/clients/http/external/octopoes.py calls them. Every call carries a timezone-aware
`valid_time` (Octopoes refuses a naive one); the default is now.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from datetime import UTC, datetime

import httpx
from pydantic import TypeAdapter

from baton.core.errors import InvalidInputError, NotFoundError
from baton.openkat.http import ServiceClient
from baton.openkat.models import OOI, ObjectPage

PAGE = TypeAdapter(ObjectPage)
OBJECT = TypeAdapter(OOI)
BY_REFERENCE = TypeAdapter(dict[str, OOI])
SCAN_LEVELS = range(5)
LOAD_BULK_BATCH = 500  # references per POST: a few tens of KiB of body


def no_such_organisation_or_type(response: httpx.Response) -> bool:
    """404: no XTDB node for the organisation; 400 "Type not found": a type Octopoes does not know
    (octopoes/api/api.py, type_not_found; mula expected a 404 there)."""
    if response.status_code == 404:
        return True
    return response.status_code == 400 and b"Type not found" in response.content


def valid_time_param(valid_time: datetime | None) -> str:
    if valid_time is None:
        return datetime.now(UTC).isoformat()
    if valid_time.tzinfo is None or valid_time.utcoffset() is None:
        raise InvalidInputError("valid_time must be timezone-aware (Octopoes refuses a naive one)")
    return valid_time.isoformat()


class OctopoesClient:
    def __init__(self, http: ServiceClient) -> None:
        self.http = http

    def objects(
        self,
        organisation_id: str,
        object_types: Collection[str],
        scan_levels: Iterable[int] = SCAN_LEVELS,
        *,
        page_size: int = 1000,
        valid_time: datetime | None = None,
    ) -> Iterator[OOI]:
        """The organisation's objects of those types at those scan levels, fetched a page at a time as the
        caller iterates (mula's page of 1000). One `valid_time` for every page, so the pages agree.
        An organisation or a type Octopoes does not know has no objects."""
        if not object_types:
            return
        valid_time = valid_time or datetime.now(UTC)  # one moment for every page
        offset = 0
        while True:
            page = self.objects_page(
                organisation_id, object_types, scan_levels, offset=offset, limit=page_size, valid_time=valid_time
            )
            if page is None:
                return
            yield from page.items
            offset += page_size
            if not page.items or offset >= page.count:
                return

    def objects_page(
        self,
        organisation_id: str,
        object_types: Collection[str],
        scan_levels: Iterable[int] = SCAN_LEVELS,
        *,
        offset: int = 0,
        limit: int = 1000,
        valid_time: datetime | None = None,
    ) -> ObjectPage | None:
        """One page of `objects`, from `offset` (a caller that keeps its place between calls passes the same
        `valid_time` each time, so the pages agree). None: Octopoes knows no such organisation or type."""
        if not object_types:
            return ObjectPage(count=0, items=[])
        params = {
            "types": sorted(object_types),
            "scan_level": sorted(set(scan_levels)),
            "limit": limit,
            "offset": offset,
            "valid_time": valid_time_param(valid_time),
        }
        return self.http.fetch_or_none(
            "GET", f"/{organisation_id}/objects", PAGE, params=params, missing=no_such_organisation_or_type
        )

    def object(self, organisation_id: str, reference: str, *, valid_time: datetime | None = None) -> OOI | None:
        params = {"reference": reference, "valid_time": valid_time_param(valid_time)}
        return self.http.fetch_or_none("GET", f"/{organisation_id}/object", OBJECT, params=params)

    def load_bulk(
        self,
        organisation_id: str,
        references: Iterable[str],
        *,
        batch_size: int = LOAD_BULK_BATCH,
        valid_time: datetime | None = None,
    ) -> dict[str, OOI]:
        """The objects that exist, by primary key, `batch_size` references per call; a reference missing
        from the answer is an object that does not exist (at `valid_time`). An object without a scan
        profile document comes back with `scan_profile` None: level 0.

        Raises NotFoundError when Octopoes does not know the organisation at all (404: no XTDB node),
        which is not the same as all its objects being gone."""
        wanted = sorted(set(references))
        found: dict[str, OOI] = {}
        params = {"valid_time": valid_time_param(valid_time)}
        path = f"/{organisation_id}/objects/load_bulk"
        for start in range(0, len(wanted), batch_size):
            batch = wanted[start : start + batch_size]
            answer = self.http.fetch_or_none("POST", path, BY_REFERENCE, params=params, json=batch)
            if answer is None:
                raise NotFoundError(f"Octopoes does not know organisation '{organisation_id}'")
            found.update(answer)
        return found

    def object_clients(
        self, reference: str, clients: Iterable[str], *, valid_time: datetime | None = None
    ) -> dict[str, OOI]:
        """Which of `clients` (organisations) hold the object, with their copy of it. Octopoes answers 404 for
        the whole call when one of them is unknown to it; that answers {} here, as in mula."""
        params = {"reference": reference, "clients": sorted(set(clients)), "valid_time": valid_time_param(valid_time)}
        if not params["clients"]:
            return {}
        return self.http.fetch_or_none("GET", "/object-clients", BY_REFERENCE, params=params) or {}
