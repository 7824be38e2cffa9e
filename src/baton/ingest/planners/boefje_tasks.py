"""The one maker of boefje tasks. Scan-profile events, due schedules (rescan_rounds.py) and a new boefje's
existing objects (new_boefjes.py) ask it for (boefje, object) pairs; twins (twins.py) for one task in
another organisation. For each pair it claims the grace period in `boefje_runs` (one atomic upsert, so
competing schedulers cannot both queue a pair; with Bytes configured, after what Bytes says of the runs
Baton did not see: last_runs.py), ranks the task by the pair's last run, pushes it and gives it its
rescan schedule (or refreshes the one it has), and notes each task it created for its twin check
(storage/queues/twin_checks.py: in the database, so a restart before the check loses none). Everything in the
caller's transaction."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from baton.core.catalogue import is_rescanned
from baton.core.jobs import BoefjeJob, boefje_job, job_document, job_hash
from baton.core.priorities import rank_boefje_task
from baton.core.queueing import PushRequest, PushResult
from baton.core.rescans import first_rescan
from baton.core.settings import Settings
from baton.ingest.planners.last_runs import LastRuns
from baton.ingest.planning import Planning
from baton.storage.engine import Session
from baton.storage.queues import operations as queues
from baton.storage.queues.twin_checks import note_twin_checks
from baton.storage.scheduling.boefje_runs import RunClaim, claim_boefje_runs
from baton.storage.scheduling.boefje_schedules import KeptSchedule, keep_schedules, reenable_schedules
from baton.storage.tables import Plugin


@dataclass(frozen=True)
class BoefjePlan:
    tasks: list[dict[str, object]]  # the tasks queued (or the queued twins they updated)
    claims: list[RunClaim]  # one per (boefje, object) asked for, in order: claimed means queued now


def schedule_for(
    settings: Settings,
    organisation: str,
    boefje: Plugin,
    job_hash: str,
    data: dict[str, object],
    now: datetime,
    rng: random.Random | None = None,
) -> KeptSchedule:
    """The schedule of a boefje task queued `now`: due again at the plugin's cron or interval, else after the
    grace period plus up to BATON_RESCAN_JITTER_SECONDS."""
    deadline = first_rescan(settings, now, boefje.cron, boefje.interval, rng)
    return KeptSchedule(organisation, job_hash, dict(data), deadline, boefje.cron)


class BoefjeTaskMaker:
    def __init__(self, planning: Planning, *, twins: bool = False, last_runs: LastRuns | None = None) -> None:
        self.planning = planning
        self.twins = twins  # note the tasks made for their twin check (deduplication on, KATalogus and Octopoes)
        self.last_runs = last_runs  # Bytes, asked about runs Baton did not see; None: Bytes not configured

    def make(
        self,
        session: Session,
        wanted: Sequence[tuple[Plugin, str | None]],
        now: datetime,
        *,
        grace: timedelta | None = None,
        schedules: Mapping[tuple[str, str | None], uuid.UUID] | None = None,
    ) -> BoefjePlan:
        """A task for each (boefje, object) whose grace-period claim this call wins (`grace`: the planning's
        unless told), ranked by its last run. An object None is a job without one (a schedule's whose task
        had no `input_ooi`): its grace period is kept under the empty object key. `schedules`: the schedules
        the tasks belong to, by (boefje, object), which the caller writes itself (the rescan rounds); without
        them each queued pair's schedule is created or refreshed, and one disabled for a reason enabled again
        (a pair that ran within the grace period too: it is fit to scan)."""
        planning = self.planning
        organisation = planning.organisation
        pairs = [(boefje.id, key or "") for boefje, key in wanted]
        grace = planning.grace if grace is None else grace
        if self.last_runs is not None:
            self.last_runs.check(session, organisation, pairs, now, grace)
        claims = claim_boefje_runs(session, organisation, pairs, now, grace)
        jobs: list[tuple[Plugin, str | None, BoefjeJob, str]] = []
        fit_not_queued: list[str] = []
        for (boefje, object_key), claim in zip(wanted, claims, strict=True):
            job = boefje_job(
                uuid.uuid4(), boefje.id, boefje.name, boefje.version, boefje.oci_image, object_key, organisation
            )
            digest = job_hash(job)
            if claim.claimed:
                jobs.append((boefje, object_key, job, digest))
            else:
                fit_not_queued.append(digest)
        if schedules is None:
            kept = [
                schedule_for(planning.settings, organisation, boefje, digest, job_document(job), now)
                for boefje, _, job, digest in jobs
                if is_rescanned(boefje.run_on)
            ]
            by_hash = keep_schedules(session, kept, now)
            reenable_schedules(session, organisation, fit_not_queued, now)
            schedules = {(boefje.id, key): by_hash[digest] for boefje, key, _, digest in jobs if digest in by_hash}
        previous = {pair: claim.previous_run for pair, claim in zip(pairs, claims, strict=True)}
        requests: list[PushRequest] = []
        for boefje, object_key, job, digest in jobs:
            schedule_id = schedules.get((boefje.id, object_key))
            requests.append(
                PushRequest(
                    queue=planning.queue,
                    priority=rank_boefje_task(previous[(boefje.id, object_key or "")], now),
                    data=job_document(job),
                    hash=digest,
                    schedule_id=None if schedule_id is None else str(schedule_id),
                    task_id=job.id,
                )
            )
        results = queues.push_many(session, requests, now)
        if self.twins:
            levels = {boefje.id: boefje.scan_level for boefje, _ in wanted}
            note_twin_checks(session, organisation, twin_checks(results, levels), now)
        return BoefjePlan([result.task for result in results], claims)

    def make_twin(
        self, session: Session, organisation: str, boefje_id: str, input_ooi: str, request: PushRequest, now: datetime
    ) -> PushResult | None:
        """A twin (`request`, a task of another organisation's queue) pushed if its (boefje, object) claims
        that organisation's grace period; None when it ran there within it."""
        grace = self.planning.grace
        if self.last_runs is not None:
            self.last_runs.check(session, organisation, [(boefje_id, input_ooi)], now, grace)
        [claim] = claim_boefje_runs(session, organisation, [(boefje_id, input_ooi)], now, grace)
        if not claim.claimed:
            return None
        return queues.push(session, request, now)


def twin_checks(results: Sequence[PushResult], scan_levels: Mapping[str, int]) -> list[tuple[uuid.UUID, str, int, str]]:
    """(task id, boefje, its scan level, object) of each task created (not a queued one updated) that has an
    object: a job without one has no twin."""
    checks = []
    for result in results:
        data = result.task["data"]
        boefje_id, input_ooi = data["boefje"]["id"], data.get("input_ooi")
        if result.created and input_ooi and boefje_id in scan_levels:
            checks.append((uuid.UUID(str(result.task["id"])), boefje_id, scan_levels[boefje_id], input_ooi))
    return checks
