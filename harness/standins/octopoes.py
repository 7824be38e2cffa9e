"""An Octopoes stand-in: objects per organisation (an XTDB node each) with a type and a scan profile,
speaking Octopoes' wire format for the calls Baton makes.

Source: nl-kat-coordination octopoes/octopoes/api/router.py (list_objects, get_object, load_objects_bulk,
health), bulk_router.py (list_object_clients) and api.py (the exception handlers: a validation error
answers 422 with the errors as a string, TypeNotFound 400 "Type not found", ObjectNotFoundException 404,
NodeNotFound 404 "Node not found"; an unreachable XTDB 500). Checked against Octopoes' API run from its
source (without XTDB) for the answers that need none: 422 for a naive or missing valid_time, 400 for an
unknown type, 422 for scan level 7 or a load_bulk without a body.
`valid_time` is an AwareDatetime: a naive or missing one is refused. The serialisation of objects is
octopoes/octopoes/models/__init__.py (OOI, ScanProfileBase); load_bulk answers what
ooi_repository.load_bulk gives: by primary key, with the scan profile document pulled through
`_reference`, or null when an object has none (the other calls fill in an empty profile, level 0).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from fastapi import Body, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime

from harness.standins.common import Standin

# The concrete types a test may use besides those of the objects it adds ("OOI" is every type).
KNOWN_TYPES = frozenset(
    {
        "Hostname",
        "IPAddressV4",
        "IPAddressV6",
        "Network",
        "DNSZone",
        "IPPort",
        "IPService",
        "Website",
        "URL",
        "HostnameHTTPURL",
        "HTTPResource",
        "ResolvedHostname",
        "SoftwareInstance",
    }
)


class ScanLevel(IntEnum):  # octopoes/models/__init__.py
    L0 = 0
    L1 = 1
    L2 = 2
    L3 = 3
    L4 = 4


class OctopoesStandin(Standin):
    def __init__(self) -> None:
        super().__init__("Octopoes API stand-in")
        self.nodes: dict[str, dict[str, dict[str, Any]]] = {}  # organisation -> primary key -> object
        self.types: set[str] = set(KNOWN_TYPES)
        self._sorted: dict[str, list[str]] = {}  # organisation -> primary keys in listing order
        self._routes()

    # --- the state, as a test drives it ---

    def add_organisation(self, organisation_id: str) -> None:
        with self.lock:
            self.nodes.setdefault(organisation_id, {})

    def remove_organisation(self, organisation_id: str) -> None:
        with self.lock:
            self.nodes.pop(organisation_id, None)
            self._sorted.pop(organisation_id, None)

    def add_object(
        self,
        organisation_id: str,
        reference: str,
        *,
        level: int = 0,
        profile: str | None = "declared",
        fields: dict[str, Any] | None = None,
    ) -> None:
        """An object "Type|natural|key" at a scan level; `profile` is its scan profile's type ("declared",
        "inherited", "empty") or None for an object without a scan profile document."""
        object_type = reference.split("|", 1)[0]
        with self.lock:
            self.types.add(object_type)
            self.nodes.setdefault(organisation_id, {})[reference] = {
                "object_type": object_type,
                "primary_key": reference,
                "level": level if profile is not None else 0,
                "profile": profile,
                "fields": fields or {},
            }
            self._sorted.pop(organisation_id, None)

    def set_level(self, organisation_id: str, reference: str, level: int, profile: str = "declared") -> None:
        with self.lock:
            self.nodes[organisation_id][reference].update(level=level, profile=profile)

    def remove_object(self, organisation_id: str, reference: str) -> None:
        with self.lock:
            self.nodes[organisation_id].pop(reference, None)
            self._sorted.pop(organisation_id, None)

    # --- serialisation ---

    @staticmethod
    def _out(item: dict[str, Any], *, populated: bool) -> dict[str, Any]:
        profile = item["profile"]
        if profile is None and populated:
            profile = "empty"  # core/service.py _populate_scan_profiles
        scan_profile = (
            None
            if profile is None
            else {
                "scan_profile_type": profile,
                "reference": item["primary_key"],
                "level": item["level"],
                "user_id": None,
            }
        )
        return {
            "object_type": item["object_type"],
            "scan_profile": scan_profile,
            "user_id": None,
            "primary_key": item["primary_key"],
            **item["fields"],
        }

    def _node(self, organisation_id: str) -> dict[str, dict[str, Any]]:
        if organisation_id not in self.nodes:
            raise HTTPException(404, "Node not found")
        return self.nodes[organisation_id]

    def _listing_order(self, organisation_id: str) -> list[str]:
        node = self._node(organisation_id)
        if organisation_id not in self._sorted:  # order_by "object_type", ascending
            self._sorted[organisation_id] = sorted(node, key=lambda key: (node[key]["object_type"], key))
        return self._sorted[organisation_id]

    # --- the API ---

    def _routes(self) -> None:
        app = self.app

        @app.exception_handler(RequestValidationError)
        def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
            return JSONResponse({"detail": str(exc.errors())}, status_code=422)  # api.py: detail=str(exc)

        @app.get("/health")
        def root_health() -> dict[str, Any]:
            return {"service": "octopoes", "healthy": True, "version": "stand-in", "additional": None, "results": []}

        @app.get("/object-clients")
        def list_object_clients(
            valid_time: AwareDatetime, reference: str = Query(""), clients: set[str] = Query(default_factory=set)
        ) -> dict[str, Any]:
            with self.lock:
                found = {}
                for client in clients:
                    item = self._node(client).get(reference)  # an unknown client: 404 for the whole call
                    if item is not None:
                        found[client] = self._out(item, populated=True)
                return found

        @app.get("/{client}/health")
        def health(client: str) -> dict[str, Any]:
            with self.lock:
                self._node(client)
            xtdb = {"service": "xtdb", "healthy": True, "version": None, "additional": None, "results": []}
            octopoes = {"service": "octopoes", "healthy": True, "version": "stand-in", "additional": None}
            return {**octopoes, "results": [xtdb]}

        @app.get("/{client}/objects")
        def list_objects(
            client: str,
            valid_time: AwareDatetime,
            types: list[str] = Query(["OOI"]),
            scan_level: set[ScanLevel] = Query(set(ScanLevel)),
            scan_profile_type: set[str] = Query({"declared", "inherited", "empty"}),
            offset: int = 0,
            limit: int = 20,
        ) -> dict[str, Any]:
            with self.lock:
                if any(name != "OOI" and name not in self.types for name in types):
                    raise HTTPException(400, "Type not found")  # models/types.py type_by_name: TypeNotFound
                node = self._node(client)
                wanted = None if "OOI" in types else set(types)
                levels = {int(level) for level in scan_level}
                matching = [
                    node[key]
                    for key in self._listing_order(client)
                    if (wanted is None or node[key]["object_type"] in wanted)
                    and node[key]["level"] in levels
                    and (node[key]["profile"] or "empty") in scan_profile_type
                ]
                page = matching[offset : offset + limit]
                return {"count": len(matching), "items": [self._out(item, populated=True) for item in page]}

        @app.get("/{client}/object")
        def get_object(client: str, valid_time: AwareDatetime, reference: str = Query("")) -> dict[str, Any]:
            with self.lock:
                item = self._node(client).get(reference)
                if item is None:
                    raise HTTPException(404, f"Object not found: {reference}")
                return self._out(item, populated=True)

        @app.post("/{client}/objects/load_bulk")
        def load_objects_bulk(
            client: str, valid_time: AwareDatetime, references: list[str] = Body(...)
        ) -> dict[str, Any]:
            with self.lock:
                node = self._node(client)
                return {ref: self._out(node[ref], populated=False) for ref in set(references) if ref in node}
