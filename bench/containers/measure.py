"""Counting what happened: exactly once, handed out twice, and what each action cost."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from typing import Any

from baton.core.recovery import REPLACED_PREFIX
from bench.containers.chaos import Action
from bench.containers.clients import EventPublisher, Ledger
from bench.containers.stack import Stack, wait_for

NEXT_ACTION_MARGIN_SECONDS = 2.0
# A task that recovery handed out again under a new id is one task with its replacement, not two.
NOT_REPLACED = f"NOT coalesce(reason LIKE '{REPLACED_PREFIX}%', false)"


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch inside [start, end] without a successful pop answer."""
    inside = sorted(t for t in times if start <= t <= end)
    points = [start, *inside, end]
    return max((b - a for a, b in itertools.pairwise(points)), default=end - start)


def event_latencies(stack: Stack, ledger: Ledger) -> dict[tuple[str, str], float]:
    """Per event: seconds from the confirmed publish to its task's creation."""
    rows = stack.query(
        "SELECT organisation, data->>'input_ooi', min(extract(epoch from created_at)) FROM tasks GROUP BY 1, 2"
    )
    created = {(org, key): float(at) for org, key, at in rows}
    return {event: created[event] - at for event, at in ledger.published.items() if event in created}


def summarise(stack: Stack, ledger: Ledger, publisher: EventPublisher, all_completed: bool) -> dict[str, Any]:
    per_event = stack.query(
        f"SELECT organisation, data->>'input_ooi', count(*) FROM tasks WHERE {NOT_REPLACED} GROUP BY 1, 2"
    )
    by_hash = stack.query(
        f"SELECT count(*) FROM (SELECT hash FROM tasks WHERE {NOT_REPLACED} GROUP BY hash HAVING count(*) > 1) AS d"
    )
    statuses = dict(stack.query("SELECT status, count(*) FROM tasks GROUP BY status"))
    recovered = stack.query("SELECT coalesce(sum(attempts), 0) FROM tasks")[0][0]
    created = {(org, key) for org, key, _ in per_event}
    sent = set(ledger.published)
    pops_per_task = Counter(task_id for _, _, task_id in ledger.pops)
    overlaps = 0
    for holds in ledger.holds.values():
        ordered = sorted(holds)
        overlaps += sum(1 for a, b in itertools.pairwise(ordered) if b[0] < a[1])
    return {
        "events_in": len(sent),
        "publish_failures": publisher.failed,
        "tasks": sum(count for _, _, count in per_event),
        "duplicated": sum(1 for _, _, count in per_event if count > 1) + int(by_hash[0][0]),
        "missing": len(sent - created),
        "unexpected": len(created - sent),
        "handed_out": len(pops_per_task),
        "handed_out_twice": sum(1 for n in pops_per_task.values() if n > 1),
        "overlaps": overlaps,
        "recovered": int(recovered),
        "completed": statuses.get("completed", 0),
        "statuses": statuses,
        "all_completed": all_completed,
        "client_errors": len(ledger.errors),
        "left_in_rabbitmq": stack.messages_left("scan_profile_mutations"),
    }


def wait_drained(stack: Stack, ledger: Ledger, timeout: float) -> bool:
    def done() -> bool:
        statuses = dict(stack.query("SELECT status, count(*) FROM tasks GROUP BY status"))
        busy = sum(statuses.get(s, 0) for s in ("queued", "dispatched", "running"))
        return bool(statuses.get("completed", 0) >= len(ledger.published) and busy == 0)

    return wait_for(done, timeout, interval=1.0) < float("inf")


def baseline_latency(ledger: Ledger, latencies: dict[tuple[str, str], float], actions: list[Action]) -> float:
    """Median event-to-task delay of events published before the first action."""
    first = actions[0].at if actions else float("inf")
    quiet = [latencies[e] for e, at in ledger.published.items() if at < first and e in latencies]
    return statistics.median(quiet) if quiet else float("nan")


def action_costs(
    actions: list[Action], ledger: Ledger, latencies: dict[tuple[str, str], float], end: float
) -> list[dict[str, Any]]:
    """Per action, over the time until the next one: client errors, the longest time without a
    successful pop, the slowest publish and the slowest event-to-task delay."""
    rows = []
    for action, following in itertools.zip_longest(actions, actions[1:]):
        until = following.at if following else min(end, action.at + 60)
        errors = sum(1 for t, _ in ledger.errors if action.at <= t < until)
        publishes = [seconds for started, seconds in ledger.publish_seconds if action.at - 1 <= started < until]
        delays = [latencies[e] for e, at in ledger.published.items() if action.at - 1 <= at < until and e in latencies]
        back = action.back_at or action.at
        # Events confirmed just before the next action may have been delayed by it: left out.
        settled = until - NEXT_ACTION_MARGIN_SECONDS if following else until
        once_back = [latencies[e] for e, at in ledger.published.items() if back <= at < settled and e in latencies]
        rows.append(
            {
                "what": action.what,
                "recovery": action.recovery or action.detail,
                "window": until - action.at,
                "client_errors": errors,
                "no_pop_seconds": longest_gap(ledger.pop_ok, action.at, until),
                "slowest_publish": max(publishes, default=0.0),
                "slowest_event_to_task": max(delays, default=float("nan")),
                "back_after": back - action.at,
                "timings": dict(action.timings),
                "load": action.load,
                "slowest_once_back": max(once_back, default=float("nan")),
            }
        )
    return rows
