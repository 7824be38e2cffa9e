"""Task data as OpenKAT's jobs: what a boefje, normalizer or report task carries in `data`, so that
OpenKAT's runners (BoefjeMeta, NormalizerMeta) and web UI can run and show every task Baton makes.

The models follow OpenKAT's scheduler (mula): extra keys are kept, not refused; `id` of a boefje or
normalizer job is the task's id. The hash of each job is OpenKAT's: MurmurHash3 x64 128-bit (seed 0)
of a string built from the job, as 32 lower-case hex digits; equal hashes are the same work.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

import mmh3
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from baton.core.errors import ContradictoryInputError
from baton.core.model import SchedulerType

# An organisation as OpenKAT's clients and messages name it: OpenKAT's codes are lower-case Unicode
# slugs (`-` and `_` anywhere), Baton's own ids ASCII letters, digits, `_`, `.`, `-`: either is accepted.
OpenKatOrganisation = Annotated[
    str,
    Field(min_length=1, max_length=64, pattern=r"^[-\w][-.\w]*$", description="An OpenKAT organisation code."),
]


class Job(BaseModel):
    model_config = ConfigDict(extra="allow")


class Boefje(Job):
    id: str = Field(min_length=1)
    name: str | None = None
    version: str | None = None
    oci_image: str | None = None


class Normalizer(Job):
    id: str = Field(min_length=1)
    name: str | None = None
    version: str | None = None


class BoefjeJob(Job):
    """OpenKAT's boefje task (mula's BoefjeTask; boefjes reads it as BoefjeMeta)."""

    id: uuid.UUID | None = None
    boefje: Boefje
    input_ooi: str | None = None
    organization: str
    deduplication_key: uuid.UUID | None = None
    dispatches: list[Normalizer] = Field(default_factory=list)


class BoefjeMeta(Job):
    """A finished boefje job as bytes describes it, inside a raw file."""

    id: uuid.UUID
    boefje: Boefje
    input_ooi: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    organization: str
    started_at: datetime | None = None
    ended_at: datetime | None = None


class RawData(Job):
    id: uuid.UUID
    boefje_meta: BoefjeMeta
    mime_types: list[dict[str, str]]
    secure_hash: str | None = None
    hash_retrieval_link: str | None = None


class NormalizerJob(Job):
    """OpenKAT's normalizer task (mula's NormalizerTask; boefjes reads it as NormalizerMeta)."""

    id: uuid.UUID | None = None
    normalizer: Normalizer
    raw_data: RawData


class ReportJob(Job):
    """OpenKAT's report task."""

    organisation_id: str
    report_recipe_id: str


JOB_MODELS: dict[SchedulerType, type[Job]] = {
    SchedulerType.BOEFJE: BoefjeJob,
    SchedulerType.NORMALIZER: NormalizerJob,
    SchedulerType.REPORT: ReportJob,
}


def job_of(kind: SchedulerType, data: dict[str, Any]) -> Job:
    """`data` read as a job of `kind` (OpenKAT's shape); refused naming each field that is not."""
    try:
        return JOB_MODELS[kind].model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"data.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise ContradictoryInputError(f"malformed item: data is not a {kind.value} job ({problems})") from exc


def murmur_hex(text: str) -> str:
    """OpenKAT's task hash: MurmurHash3 x64 128-bit, seed 0, of the UTF-8 text, as 32 hex digits."""
    return bytes(mmh3.hash_bytes(text)).hex()


def job_hash(job: Job) -> str:
    if isinstance(job, BoefjeJob):
        if job.input_ooi:
            return murmur_hex(f"{job.input_ooi}-{job.boefje.id}-{job.organization}")
        return murmur_hex(f"{job.boefje.id}-{job.organization}")
    if isinstance(job, NormalizerJob):
        meta = job.raw_data.boefje_meta
        return murmur_hex(f"{job.normalizer.id}-{meta.id}-{meta.organization}")
    if isinstance(job, ReportJob):
        return murmur_hex(f"{job.report_recipe_id}-{job.organisation_id}")
    raise TypeError(f"no hash for {type(job).__name__}")


def carries_its_task_id(kind: SchedulerType) -> bool:
    """Boefje and normalizer jobs carry the task's id as `data.id` (their runners use it)."""
    return kind in (SchedulerType.BOEFJE, SchedulerType.NORMALIZER)


def job_document(job: Job) -> dict[str, Any]:
    """The job as task `data` (JSON types: UUIDs and datetimes as strings)."""
    return job.model_dump(mode="json")


def boefje_job(
    task_id: uuid.UUID,
    plugin_id: str,
    name: str | None,
    version: str | None,
    oci_image: str | None,
    input_ooi: str | None,
    organisation: str,
) -> BoefjeJob:
    return BoefjeJob(
        id=task_id,
        boefje=Boefje(id=plugin_id, name=name, version=version, oci_image=oci_image),
        input_ooi=input_ooi,
        organization=organisation,
    )


def recognised_job(kind: SchedulerType, data: dict[str, Any], task_id: uuid.UUID) -> Job | None:
    """When `data` is a job of the queue's type (OpenKAT's shape), the job, carrying the task's id where
    OpenKAT's runners expect it; None for any other data, stored as is."""
    try:
        job = JOB_MODELS[kind].model_validate(data)
    except ValidationError:
        return None
    if carries_its_task_id(kind):
        job.id = task_id  # type: ignore[attr-defined]
    return job
