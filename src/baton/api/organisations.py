"""Organisations: creating one creates its three queues; weight and cap set its fair share."""

from __future__ import annotations

from fastapi import Request, Response, status

from baton.api import routing, security
from baton.api.deps import Responses, SettingsDep, StoreDep
from baton.api.keyset import DEFAULT_LIMIT, Cursor, Limit, PrefixSearch, link_next, page_request
from baton.api.schemas import ErrorOut, OrganisationIn, OrganisationOut, OrganisationPatch
from baton.service import organisations

router = routing.router(prefix="/organisations", tags=["organisations"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown organisation"}}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorOut, "description": "The organisation exists already"}},
    dependencies=[security.ADMIN],
)
def create(body: OrganisationIn, store: StoreDep, settings: SettingsDep) -> OrganisationOut:
    org = organisations.create_organisation(
        store, body.id, body.name, maxsize=settings.queue_maxsize, weight=body.weight, max_in_flight=body.max_in_flight
    )
    return OrganisationOut.model_validate(org)


@router.get("", dependencies=[security.READ])
def list_all(
    request: Request,
    response: Response,
    store: StoreDep,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    q: PrefixSearch = None,
) -> list[OrganisationOut]:
    """Organisations by id, a page at a time: the next page's address is in the `Link` header
    (`rel="next"`, none on the last page). `q`: only ids starting with it."""
    page = organisations.organisations_page(store, page_request("organisations", limit, cursor, q=q))
    link_next(request, response, page.next_cursor)
    return [OrganisationOut.model_validate(org) for org in page.rows]


@router.get("/{org_id}", responses=UNKNOWN, dependencies=[security.READ])
def get_one(org_id: str, store: StoreDep) -> OrganisationOut:
    return OrganisationOut.model_validate(organisations.get_organisation(store, org_id))


@router.patch("/{org_id}", responses=UNKNOWN, dependencies=[security.ADMIN])
def patch(org_id: str, body: OrganisationPatch, store: StoreDep) -> OrganisationOut:
    """Change the organisation's fair share: `weight`, or `max_in_flight` (null removes the cap)."""
    cap_given = "max_in_flight" in body.model_fields_set
    org = organisations.set_fair_share(store, org_id, body.weight, body.max_in_flight, cap_given=cap_given)
    return OrganisationOut.model_validate(org)


@router.delete("/{org_id}", status_code=status.HTTP_204_NO_CONTENT, responses=UNKNOWN, dependencies=[security.ADMIN])
def delete(org_id: str, store: StoreDep) -> Response:
    """Delete the organisation **with its queues, tasks, schedules and plugin settings**: an operator's
    explicit removal of its data, which cannot be undone. The KATalogus sync never deletes: it retires an
    organisation KATalogus no longer lists (`retired_at`), keeping its history. One KATalogus still lists
    comes back, empty, at its next poll."""
    organisations.delete_organisation(store, org_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
