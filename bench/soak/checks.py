"""The end of a soak run: what it checks, from what the run recorded (`Evidence`).

Each check says whether it passed, its measured value and a sentence with the evidence. Counts
(every task accounted for, none handed out twice, none stranded, every due schedule fired, no
traceback, each outage logged once when it starts and once when it ends) are judged in every run;
the comparisons of the run's last window with its first (memory, p99, table sizes) only in a run
long enough for them (not the smoke run: `judged` is None there).
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.soak.load import Ledger, Published
from bench.soak.observe import TaskRow, percentiles
from bench.soak.plan import BOEFJES, Plan

FINISHED = frozenset({"completed", "failed", "cancelled"})
IN_FLIGHT = frozenset({"dispatched", "running"})
MEMORY_GROWTH = 0.05  # after warm-up, over the run (issue #42)
P99_RATIO = 1.5  # last window over the first after warm-up
TABLE_RATIO = 1.2  # rows of the tasks and events tables, last window over the first
TIMEOUT_WORDS = ("status timeout", "stuck")  # what the task timeout writes in a task's reason
TIMEOUT_LINE = "recovered stuck tasks"
FAULT_OUTAGES = {"outside_service_down": "outside", "postgres_restart": "database", "rabbitmq_restart": "broker"}
JUDGED_LATENCIES = ("pop", "push", "patch")


@dataclass
class Check:
    key: str
    name: str
    passed: bool | None  # None: not judged in this run
    value: float | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "passed": self.passed, "value": self.value, "detail": self.detail}


@dataclass
class Evidence:
    plan: Plan
    seen: dict[str, TaskRow]
    final: dict[str, TaskRow]
    ledger: Ledger
    published: Published
    deadlines: dict[str, float]  # seeded schedule → deadline (epoch s)
    seeded_late: set[str]
    start_wall: float  # the run's start (epoch s)
    faults: list[dict[str, Any]]  # kind, at, ended (run clock)
    outages: list[dict[str, Any]]  # the outage lines of the logs
    tracebacks: list[dict[str, Any]]
    log_kinds: Counter[str]
    samples: list[dict[str, Any]]
    latencies: dict[str, list[tuple[float, float]]]
    failures: list[str]
    retention_acts: bool  # the retention horizon is shorter than the run
    hand_over_s: float  # a killed worker's schedulers wait this long (the lease) before others take them
    members: list[dict[str, Any]] = field(default_factory=list)  # name, role, slot, generation, started, ended


def accounted(e: Evidence) -> Check:
    """Each task seen during the run is now finished, queued, or gone with retention after it finished;
    the status a runner reported is the status it has."""
    statuses = Counter(row.status for row in e.final.values())
    removed, lost, differs = 0, [], []
    for task_id, row in e.seen.items():
        now = e.final.get(task_id)
        if now is None:
            last = e.ledger.finished.get(task_id) or (row.status if row.status in FINISHED else None)
            if last is None:
                lost.append(task_id)
            else:
                removed += 1
            continue
        reported = e.ledger.finished.get(task_id)
        if reported is not None and reported != now.status:
            differs.append(f"{task_id}: reported {reported}, now {now.status}")
    unaccounted = len(lost) + len(differs)
    detail = (
        f"{len(e.seen):,} tasks seen; now {', '.join(f'{k} {v:,}' for k, v in sorted(statuses.items()))}; "
        f"{removed:,} removed by retention after "
        f"they finished; {len(lost)} gone unfinished, {len(differs)} with another status than their runner reported"
    )
    examples = [*lost[:3], *differs[:3]]
    return Check("accounted", "every task accounted for", unaccounted == 0, unaccounted, detail + _examples(examples))


def handed_out_once(e: Evidence) -> Check:
    twice = {task: runners for task, runners in e.ledger.popped.items() if len(runners) > 1}
    detail = f"{len(e.ledger.popped):,} tasks popped by the runners; {len(twice)} of them by more than one pop"
    return Check(
        "handed_out_twice", "none handed out twice", not twice, len(twice), detail + _examples(list(twice)[:3])
    )


def not_stranded(e: Evidence) -> Check:
    """Nothing dispatched or running at the end (the runners finished what they held), and nothing the task
    timeout had to find during the run: a pop whose answer was lost (an API process killed) is settled by
    its receipt, not by the timeout."""
    left = [row.id for row in e.final.values() if row.status in IN_FLIGHT]
    found = [
        row.id
        for row in e.final.values()
        if row.reason is not None and any(word in row.reason for word in TIMEOUT_WORDS)
    ]
    recoveries = sum(count for kind, count in e.log_kinds.items() if TIMEOUT_LINE in kind)
    held = len(e.ledger.holding)
    value = len(left) + len(found) + recoveries
    detail = (
        f"{len(left)} tasks dispatched or running at the end ({held} held by a runner); {len(found)} re-queued or "
        f"failed by the task timeout; {recoveries} '{TIMEOUT_LINE}' log lines"
    )
    return Check("stranded", "none stranded dispatched", value == 0, value, detail + _examples([*left[:3], *found[:3]]))


def spaced(times: Sequence[float], grace: float) -> bool:
    """No two of the times closer than the grace period: a pair is queued again only after it."""
    ordered = sorted(times)
    return all(later - earlier >= grace * 0.99 for earlier, later in itertools.pairwise(ordered))


def events_became_tasks(e: Evidence) -> Check:
    """Every scan-profile message became a task of each Hostname boefje in its organisation (or found a
    manual run of it that came first), every raw file of a boefje one normalizer task (an error file none),
    every manual run its task, every backfill a task for each address of its organisation. A (boefje,
    object) queued again, it is a grace period later (a rescan: in a short run the grace period is short)."""
    grace = e.plan.grace_period
    hostname_boefjes = sorted(b.id for b in BOEFJES if b.enabled and b.consumes == "Hostname")
    made: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (org, boefje, object) → created
    manual: set[tuple[str, str, str]] = set()  # rocky's runs (priority 1): the grace period does not hold them
    by_raw: Counter[str] = Counter()
    for row in e.seen.values():
        if row.type == "boefje" and row.input_ooi is not None and row.boefje:
            key = (row.organisation, row.boefje, row.input_ooi)
            if row.priority == 1:
                manual.add(key)
            else:
                made[key].append(row.created)
        elif row.type == "normalizer" and row.raw_id is not None:
            by_raw[row.raw_id] += 1
    wrong: list[str] = []
    for organisation, reference in e.published.mutations:
        for boefje in hostname_boefjes:
            # A manual run that came first claimed the grace period: the message then makes no task.
            times = made.get((organisation, boefje, reference), [])
            if not (times or (organisation, boefje, reference) in manual) or not spaced(times, grace):
                wrong.append(f"{boefje} on {reference}: {len(times)} tasks")
    for raw_id, (_org, mime, _sent) in e.published.raw_files.items():
        wanted = 0 if mime.startswith("error/") else 1
        if by_raw[raw_id] != wanted:
            wrong.append(f"raw file {raw_id} ({mime}): {by_raw[raw_id]} tasks")
    wrong += [f"manual run {task}: never seen" for task in e.published.manual_runs if task not in e.seen]
    for organisation, boefje, _at in e.published.backfills:
        objects = {key[2]: times for key, times in made.items() if key[:2] == (organisation, boefje)}
        if len(objects) != e.plan.addresses or not all(spaced(times, grace) for times in objects.values()):
            wrong.append(f"backfill of {boefje} for {organisation}: {len(objects)} of {e.plan.addresses} objects")
    twins = sum(1 for row in e.seen.values() if row.deduplication_key and row.deduplication_key != row.id)
    errors = sum(1 for _o, mime, _s in e.published.raw_files.values() if mime.startswith("error/"))
    detail = (
        f"{len(e.published.mutations):,} scan-profile messages, {len(e.published.raw_files):,} raw files "
        f"({errors:,} of failed boefjes), {len(e.published.manual_runs):,} manual runs "
        f"({e.published.manual_refused:,} refused as queued already), {len(e.published.backfills)} backfills; "
        f"{twins:,} twins made; {len(wrong)} with other tasks than expected"
    )
    return Check("events", "every event became its tasks", not wrong, len(wrong), detail + _examples(wrong[:3]))


def schedules_fired(e: Evidence) -> Check:
    """Every seeded schedule due before the run ended fired, once, not before its deadline, and within its
    interval (before it would have come due again: a grace period after its deadline, the interval of a
    schedule without a cron), judged always. How late after the deadline is measured for all, and how many
    fired later than one rescan round (not judged: a round every BATON_RESCAN_INTERVAL_SECONDS, on a machine
    of two cores shared with the load) among those not due during a fault."""
    end_wall = e.start_wall + e.plan.seconds
    fired: dict[str, list[float]] = defaultdict(list)
    for row in e.seen.values():
        if row.schedule_id in e.deadlines:
            fired[row.schedule_id].append(row.created)
    due = [sid for sid, deadline in e.deadlines.items() if deadline <= end_wall]
    not_fired = [sid for sid in due if not fired.get(sid)]
    twice = [sid for sid in due if not spaced(fired.get(sid, []), e.plan.grace_period)]
    early = [sid for sid in due if any(created < e.deadlines[sid] - 1 for created in fired.get(sid, []))]
    late = {sid: min(fired[sid]) - e.deadlines[sid] for sid in due if fired.get(sid) and sid not in e.seeded_late}
    missed_interval = [sid for sid, seconds in late.items() if seconds >= e.plan.grace_period]
    interval = e.plan.rescan_interval
    undisturbed = {sid: s for sid, s in late.items() if not disturbed(e, e.deadlines[sid] - e.start_wall)}
    over = [sid for sid, seconds in undisturbed.items() if seconds > interval]
    judged = len(not_fired) + len(twice) + len(early) + len(missed_interval)
    timing = percentiles(list(late.values()))
    detail = (
        f"{len(due):,} of {len(e.deadlines):,} seeded schedules came due during the run ({len(e.seeded_late)} "
        f"seeded after their deadline: not timed); {len(not_fired)} never fired, {len(twice)} fired twice within "
        f"a grace period, {len(early)} before their deadline, {len(missed_interval)} later than their interval "
        f"({e.plan.grace_period:g} s); after the deadline p50 {_s(timing['p50_ms'])}, p99 {_s(timing['p99_ms'])}, "
        f"max {_s(timing['max_ms'])}; of {len(undisturbed):,} due outside the faults, {len(over)} later than one "
        f"rescan round ({interval:g} s; not judged)"
    )
    return Check("schedules", "every due schedule fired within its interval", judged == 0, judged, detail)


def disturbed(e: Evidence, at: float) -> bool:
    """Whether a moment of the run fell in a fault, or in the time after it until its effects are over:
    the outage itself, then a lease for a killed worker's schedulers, a rescan interval for the rest."""
    for fault in e.faults:
        after = e.hand_over_s if fault["kind"] == "worker_sigkill" else 0.0
        if fault["at"] - 1 <= at <= fault["ended"] + after + e.plan.rescan_interval + 5:
            return True
    return False


def no_traceback(e: Evidence) -> Check:
    detail = f"{len(e.tracebacks)} tracebacks in the logs of {len(e.members)} Baton processes"
    examples = [f"{t['process']}: {t.get('event') or t.get('line')}" for t in e.tracebacks[:3]]
    return Check("tracebacks", "no traceback", not e.tracebacks, len(e.tracebacks), detail + _examples(examples))


def outages_logged_once(e: Evidence) -> Check:
    """Per process and kind of outage (database, outside service, broker): one line when it starts and one
    when it ends for each fault of that kind, and no outage line without a fault of its kind."""
    faults = Counter(FAULT_OUTAGES[f["kind"]] for f in e.faults if f["kind"] in FAULT_OUTAGES)
    lines: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for line in e.outages:
        lines[(line["process"], line["what"])][line["edge"]] += 1
    killed = {m["name"] for m in e.members if m.get("killed")}
    wrong = []
    for (process, what), edges in sorted(lines.items()):
        # A process killed during an outage cannot say it ended.
        ends = edges["end"] <= edges["start"] if process in killed else edges["end"] == edges["start"]
        if edges["start"] > faults[what] or not ends:
            wrong.append(f"{process}, {what}: {edges['start']} start and {edges['end']} end lines for {faults[what]}")
    noticed = {what for (_process, what), edges in lines.items() if edges["start"]}
    unnoticed = [what for what in faults if what not in noticed]
    wrong += [f"{what}: no process logged the outage" for what in unnoticed]
    detail = f"{len(e.outages)} outage lines for {sum(faults.values())} outages; {len(wrong)} not logged once each way"
    return Check(
        "outage_logs",
        "each outage logged once when it starts and once when it ends",
        not wrong,
        len(wrong),
        detail + _examples(wrong[:4]),
    )


def clients_succeeded(e: Evidence) -> Check:
    refused = e.ledger.refused
    detail = f"{len(e.failures)} client failures, {len(refused)} PATCHes refused"
    examples = [*e.failures[:2], *(str(r) for r in refused[:2])]
    value = len(e.failures) + len(refused)
    return Check("client_failures", "every client call answered", value == 0, value, detail + _examples(examples))


# -- the comparisons of the last window with the first (a full run only) --------------------------------------


def memory_growth(e: Evidence) -> Check:
    """Resident and unique memory of each process that ran the whole run: the mean of its last three samples
    over the mean of its first three after warm-up."""
    names = [m["name"] for m in e.members if m["generation"] == 0 and not m.get("killed")]
    growth: dict[str, dict[str, float]] = {}
    for name in names:
        first = _values(e.samples, name, e.plan.warm_up, e.plan.warm_up + 3 * e.plan.sample_every)
        last = _values(e.samples, name, e.plan.seconds - 3 * e.plan.sample_every, e.plan.seconds + 1)
        if first and last:
            growth[name] = {
                key: statistics.mean(s[key] for s in last) / statistics.mean(s[key] for s in first) - 1
                for key in ("rss_mib", "uss_mib")
            }
    worst = max((max(values.values()) for values in growth.values()), default=None)
    detail = "; ".join(
        f"{name}: RSS {values['rss_mib']:+.1%}, USS {values['uss_mib']:+.1%}" for name, values in growth.items()
    )
    return _judged(e, "memory_growth", "memory after warm-up grows by at most 5 %", worst, MEMORY_GROWTH, detail)


def p99_steady(e: Evidence) -> Check:
    ratios = window_p99s(e)
    worst = max((r["ratio"] for kind, r in ratios.items() if kind in JUDGED_LATENCIES and r["ratio"]), default=None)
    detail = "; ".join(
        f"{kind} {_ms(r['first_ms'])} → {_ms(r['last_ms'])}" + (f" ({r['ratio']:.2f}x)" if r["ratio"] else "")
        for kind, r in ratios.items()
    )
    return _judged(
        e, "p99_ratio", "p99 in the last window within 1.5x of the first after warm-up", worst, P99_RATIO, detail
    )


def window_p99s(e: Evidence) -> dict[str, dict[str, Any]]:
    (a, b), (c, d) = e.plan.first_window, e.plan.last_window
    out = {}
    for kind, values in sorted(e.latencies.items()):
        first = percentiles([s for at, s in values if a <= at < b])["p99_ms"]
        last = percentiles([s for at, s in values if c <= at < d])["p99_ms"]
        out[kind] = {"first_ms": first, "last_ms": last, "ratio": last / first if first and last else None}
    return out


def tables_steady(e: Evidence) -> Check:
    """Rows of the tasks and events tables (live tuples) in the last window over the first: retention
    removes as many as arrive."""
    (a, b), (c, d) = e.plan.first_window, e.plan.last_window

    def rows(start: float, end: float) -> float | None:
        found = [
            sum(s["postgres"]["tables"].get(t, {}).get("live", 0) for t in ("tasks", "events"))
            for s in e.samples
            if start <= s["at"] < end and s.get("postgres", {}).get("tables")
        ]
        return statistics.mean(found) if found else None

    first, last = rows(a, b), rows(c, d)
    ratio = last / first if first and last else None
    detail = f"tasks + events rows {first or 0:,.0f} → {last or 0:,.0f}"
    if not e.retention_acts:
        detail += "; retention's horizon is longer than the run (its smallest, a day): it could not remove a task"
    return _judged(e, "table_ratio", "tables at steady state (retention keeps up)", ratio, TABLE_RATIO, detail)


def _judged(e: Evidence, key: str, name: str, value: float | None, threshold: float, detail: str) -> Check:
    if e.plan.quick:
        return Check(key, name, None, value, detail + " (not judged: a smoke run is too short to compare windows)")
    return Check(key, name, value is not None and value <= threshold, value, detail)


def _values(samples: Sequence[dict[str, Any]], name: str, start: float, end: float) -> list[dict[str, Any]]:
    return [s["processes"][name] for s in samples if start <= s["at"] < end and name in s["processes"]]


def _examples(items: Sequence[str]) -> str:
    return f" (e.g. {'; '.join(items)})" if items else ""


def _s(milliseconds: float | None) -> str:
    return "—" if milliseconds is None else f"{milliseconds / 1000:.1f} s"


def _ms(milliseconds: float | None) -> str:
    return "—" if milliseconds is None else f"{milliseconds:.0f} ms"


def every_check(e: Evidence) -> list[Check]:
    return [
        accounted(e),
        handed_out_once(e),
        not_stranded(e),
        events_became_tasks(e),
        schedules_fired(e),
        no_traceback(e),
        outages_logged_once(e),
        clients_succeeded(e),
        memory_growth(e),
        p99_steady(e),
        tables_steady(e),
    ]
