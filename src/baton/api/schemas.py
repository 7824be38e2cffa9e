"""Pydantic models of the HTTP API: what goes over the wire, validated at the edge."""

from __future__ import annotations

import re
import uuid
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from baton.core.events import NOT_A_STRING
from baton.core.filters import FilterTree, parse_filters
from baton.core.model import OrganisationId, SchedulerState, SchedulerType, TaskStatus
from baton.core.moments import in_range

__all__ = ["OrganisationId"]
MAX_LIST_LIMIT = 1000
MAX_OFFSET = 2**31 - 1  # what either database accepts as OFFSET, with room to spare
# A route's `openapi_extra` key: query parameters it does not know are ignored, not refused (OpenKAT's
# web UI sends every query parameter of its own page along).
IGNORES_UNKNOWN_QUERY_PARAMETERS = "x-ignores-unknown-query-parameters"


def _iso_only(value: object) -> object:
    # pydantic reads "0.5" as a Unix timestamp; OpenKAT's clients send ISO dates: only those.
    if isinstance(value, str) and not ISO_DATE.match(value):
        raise ValueError("Input should be an ISO 8601 date or date-time, e.g. 2026-01-31 or 2026-01-31T08:00:00Z")
    return value


ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
# Every date a request carries (listings' and searches' filters, a schedule's deadline) is this type:
# out of the range every backend holds (core/moments.py), it is a 422 naming the field.
Moment = Annotated[datetime | date, BeforeValidator(_iso_only), AfterValidator(in_range)]
Priority = Annotated[int, Field(ge=-(2**31), le=2**31 - 1, description="Lower pops first."), NOT_A_STRING]
TaskHash = Annotated[str, Field(min_length=1, max_length=256, description="Dedup key within the queue.")]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


FilterColumn = Literal[
    "data",
    "id",
    "scheduler_id",
    "schedule_id",
    "organisation",
    "type",
    "priority",
    "status",
    "hash",
    "created_at",
    "modified_at",
]
FilterOperator = Literal[
    "eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "like", "ilike", "contains", "==", "!=", "<", "<=", ">", ">="
]


class Filter(StrictModel):
    """One condition: `column` (or a `field` path into `data`, levels joined by `__`) `operator` `value`."""

    column: FilterColumn
    field: str | None = Field(None, max_length=512, pattern=r"^([A-Za-z0-9_\-]+(__[A-Za-z0-9_\-]+)*)?$")
    operator: FilterOperator = "eq"
    value: Any = Field(description="A list for in/not_in, a pattern for like/ilike, JSON for contains.")


class AndFilter(StrictModel):
    and_: list[FilterNode] = Field(alias="and")


class OrFilter(StrictModel):
    or_: list[FilterNode] = Field(alias="or")


class NotFilter(StrictModel):
    not_: list[FilterNode] = Field(alias="not")


FilterNode = Filter | AndFilter | OrFilter | NotFilter


def _check_filters(value: Any) -> Any:
    """Validate with the filter language's own rules first: one short message naming the filter,
    instead of the union's alternatives one by one (which ran to kilobytes)."""
    if value is not None:
        parse_filters(value)
    return value


# A list of filters (AND) or one filter or group; compiled to SQL by filters.py. The models above
# document the shape in OpenAPI; `parse_filters` decides what is valid.
FilterSpec = Annotated[list[FilterNode] | FilterNode, BeforeValidator(_check_filters)]


def dump_filters(spec: FilterSpec | None) -> Any:
    """Back to the plain JSON shape of the filter language (group keys `and`/`or`/`not`)."""
    if spec is None:
        return None
    if isinstance(spec, list):
        return [dump_filters(item) for item in spec]
    return spec.model_dump(by_alias=True, exclude_unset=True)


def filter_tree(spec: FilterSpec | None) -> FilterTree | None:
    """The validated filter tree the storage layer compiles (None: no filter)."""
    return None if spec is None else parse_filters(dump_filters(spec))


Weight = Annotated[
    int, Field(ge=1, le=1000, description="Share of pops across organisations (relative)."), NOT_A_STRING
]
MaxInFlight = Annotated[
    int, Field(ge=1, le=1_000_000, description="Tasks of one queue dispatched or running at most."), NOT_A_STRING
]


class OrganisationIn(StrictModel):
    id: OrganisationId
    name: str = Field(min_length=1, max_length=256)
    weight: Weight = 1
    max_in_flight: MaxInFlight | None = None


class OrganisationPatch(StrictModel):
    """Fair share: `weight` (default 1) and `max_in_flight` (null: no cap)."""

    weight: Weight | None = None
    max_in_flight: MaxInFlight | None = None


class OrganisationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    weight: int
    max_in_flight: int | None
    created_at: datetime
    retired_at: datetime | None = Field(
        None,
        description="When the KATalogus sync retired it (KATalogus no longer lists it): its schedulers do not run "
        "and its queues take and hand out no task; its tasks and schedules stay readable. Null: active.",
    )


class QueueOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    organisation: str
    type: SchedulerType
    size: int = Field(description="Queued tasks.")
    in_flight: int = Field(description="Tasks dispatched or running.")
    maxsize: int
    enabled: bool


class PushIn(StrictModel):
    priority: Priority
    data: dict[str, Any]
    hash: TaskHash | None = None
    schedule_id: str | None = Field(None, max_length=64)


class PopIn(StrictModel):
    filters: FilterSpec | None = None


class TaskOut(BaseModel):
    """A task. On `/queues/...` `scheduler_id` is the queue id; on `/schedulers/...` and `/tasks/...`
    it is OpenKAT's scheduler id, the task type. `queue` is always the queue id."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    queue: str
    scheduler_id: str
    schedule_id: str | None
    organisation: str
    type: SchedulerType
    priority: int
    status: TaskStatus
    hash: str | None
    data: dict[str, Any]
    attempts: int
    reason: str | None
    created_at: datetime
    modified_at: datetime


class TaskPatch(StrictModel):
    status: TaskStatus


class TaskList(BaseModel):
    """A page in OpenKAT's shape: `next` and `previous` are the URLs of the neighbouring pages."""

    count: int
    next: str | None = None
    previous: str | None = None
    results: list[TaskOut]


class LeaderOut(BaseModel):
    role: str
    holder: str
    term: int = Field(description="Grows with every takeover; schedulers started under it carry it.")
    lease_expires_at: datetime | None = Field(description="Unless renewed, another may lead after this.")


class SchedulerOut(BaseModel):
    id: str
    organisation: str
    type: SchedulerType
    enabled: bool
    maxsize: int
    runner: str | None
    state: SchedulerState
    location: str | None
    last_heartbeat: datetime | None
    owner: str | None = Field(description="Who holds this scheduler's lease (host:pid#id); none when nobody runs it.")
    term: int = Field(description="The fencing token: grows with every claim; writes of older terms are refused.")
    lease_expires_at: datetime | None
    leader: LeaderOut | None = Field(description="The directors' leadership lease (none in worker mode).")


class SchedulerPatch(StrictModel):
    enabled: StrictBool


class PopResults(BaseModel):
    results: list[TaskOut]


class ErrorOut(BaseModel):
    detail: Any
    message: str | None = None
