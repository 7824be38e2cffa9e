"""Organisations: creating one creates its three queues."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from baton.api.deps import SettingsDep, StoreDep
from baton.schemas import ErrorOut, OrganisationIn, OrganisationOut
from baton.store import create_organisation, delete_organisation, list_organisations

router = APIRouter(prefix="/organisations", tags=["organisations"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorOut, "description": "The organisation exists already"}},
)
def create(body: OrganisationIn, store: StoreDep, settings: SettingsDep) -> OrganisationOut:
    with store.session() as session:
        org = create_organisation(session, body.id, body.name, settings.queue_maxsize)
        return OrganisationOut.model_validate(org)


@router.get("")
def list_all(store: StoreDep) -> list[OrganisationOut]:
    with store.session() as session:
        return [OrganisationOut.model_validate(org) for org in list_organisations(session)]


@router.delete(
    "/{org_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={404: {"model": ErrorOut, "description": "Unknown organisation"}},
)
def delete(org_id: str, store: StoreDep) -> Response:
    with store.session() as session:
        delete_organisation(session, org_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
