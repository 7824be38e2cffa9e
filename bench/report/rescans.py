"""The rescans section: due schedules turned into tasks against a raw INSERT, lateness, outside calls."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, table


def section_rescans(result: dict[str, Any]) -> list[str]:
    ratios, lateness = result["ratios"], result["lateness_s"]
    calls = result["calls"]
    per_endpoint = "; ".join(
        f"{service}: " + ", ".join(f"`{endpoint}` {count:,}" for endpoint, count in sorted(counts.items()))
        for service, counts in sorted(calls.items())
    )
    complete = "yes" if result["complete"] else "**NO: the measurement is invalid**"
    rows = [
        [
            f"rescan rounds ({result['organisations']} boefje schedulers, checks included)",
            num(result["per_second"]),
            pct(ratios["tasks_to_raw_insert"]),
        ],
        [
            "raw INSERT, one statement per task, one connection (mean of before and after: "
            + " and ".join(num(rate) for rate in result.get("raw_insert_runs", []))
            + ")",
            num(result["raw_insert_per_second"]),
            "100%",
        ],
    ]
    return [
        "## Periodic rescans: due schedules become tasks",
        "",
        measured_on(result),
        "",
        f"{result['schedules']:,} boefje schedules over {result['organisations']} organisations, all due at the "
        f"start, for objects Octopoes holds at a sufficient level, the boefje enabled in KATalogus for every "
        "organisation (its listing written a poll before: each scheduler reads it once); KATalogus and Octopoes "
        f"stand-ins (in a process of their own) answer each call after "
        f"{num(result['latency_ms'], 1)} ms. Each organisation's boefje scheduler reads its KATalogus listing once, "
        f"then its rescan rounds read every due schedule oldest deadline first, 1,000 a page, check each page in "
        f"bulk (the catalogue in the database, one Octopoes `load_bulk` per 500 references, the grace period in "
        f"`boefje_runs`) and queue the tasks through the planner's admission path; {result['threads']} threads "
        f"share the schedulers. Every schedule became a task: {complete} ({result['tasks']:,} tasks in "
        f"{num(result['seconds'], 1)} s; {result['left_due']} schedules left due).",
        "",
        *table(["", "tasks/s", "ratio"], rows, "lrr"),
        f"Lateness after the deadline (from the start of the run for schedules due before it): p50 "
        f"{num(lateness['p50'], 1)} s, p99 {num(lateness['p99'], 1)} s, max {num(lateness['max'], 1)} s: with "
        f"every schedule due at the same moment it is the time the backlog takes to drain at the rate above "
        f"(oldest deadlines first in each organisation, the organisations side by side); in a steady state the "
        f"jitter spreads a day's rescans over hours, {result['schedules']:,} a day being about "
        f"{num(result['schedules'] / 86_400, 1)} a second, each handled at the next round "
        f"(BATON_RESCAN_INTERVAL_SECONDS). "
        f"Outside calls: {result['outside_calls']:,} in all, {num(ratios['calls_per_1000'], 1)} per 1,000 "
        f"schedules (mula: about 3,000, one KATalogus, one Octopoes and one Bytes call each) — {per_endpoint}.",
        "",
    ]
