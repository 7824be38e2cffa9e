"""Organisations: creating one creates its three queues; weight and cap set its fair share."""

from __future__ import annotations

from fastapi import Request, Response, status

from baton.api import routing, security
from baton.api.deps import AppServicesDep, Responses
from baton.api.keyset import DEFAULT_LIMIT, Cursor, Limit, PrefixSearch, link_next, page_request
from baton.api.schemas import ErrorOut, OrganisationIn, OrganisationOut, OrganisationPatch

router = routing.router(prefix="/organisations", tags=["organisations"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation"}}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorOut, "description": "The organisation exists already"}},
    dependencies=[security.ADMIN],
)
def create(body: OrganisationIn, services: AppServicesDep) -> OrganisationOut:
    org = services.organisations.create(body.id, body.name, weight=body.weight, max_in_flight=body.max_in_flight)
    return OrganisationOut.model_validate(org)


@router.get("", dependencies=[security.READ])
def list_all(
    request: Request,
    response: Response,
    services: AppServicesDep,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    q: PrefixSearch = None,
) -> list[OrganisationOut]:
    """Organisations by id, a page at a time: the next page's address is in the `Link` header
    (`rel="next"`, none on the last page). `q`: only ids starting with it."""
    page = services.organisations.page(page_request("organisations", limit, cursor, q=q))
    link_next(request, response, page.next_cursor)
    return [OrganisationOut.model_validate(org) for org in page.rows]


@router.get("/{org_id}", responses=UNKNOWN, dependencies=[security.READ])
def get_one(org_id: str, services: AppServicesDep) -> OrganisationOut:
    return OrganisationOut.model_validate(services.organisations.get(org_id))


@router.patch("/{org_id}", responses=UNKNOWN, dependencies=[security.ADMIN])
def patch(org_id: str, body: OrganisationPatch, services: AppServicesDep) -> OrganisationOut:
    """Change the organisation's fair share: `weight`, or `max_in_flight` (null removes the cap)."""
    cap_given = "max_in_flight" in body.model_fields_set
    org = services.organisations.set_fair_share(org_id, body.weight, body.max_in_flight, cap_given=cap_given)
    return OrganisationOut.model_validate(org)


@router.delete("/{org_id}", status_code=status.HTTP_204_NO_CONTENT, responses=UNKNOWN, dependencies=[security.ADMIN])
def delete(org_id: str, services: AppServicesDep) -> Response:
    """Delete the organisation **with its queues, tasks, schedules and plugin settings**: an operator's
    explicit removal of its data, which cannot be undone. The KATalogus sync never deletes: it retires an
    organisation KATalogus no longer lists (`retired_at`), keeping its history. One KATalogus still lists
    comes back, empty, at its next poll."""
    services.organisations.delete(org_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
