"""The rescans section: due schedules turned into tasks against a raw INSERT, with and without twin checks;
lateness, outside calls."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, table
from bench.report.targets import baseline_moments


def rescan_series(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The run's rounds, labelled: without twin checks first (the targets' series), then with them. A
    result from before the rounds ran twice holds only the top-level one."""
    with_checks = "twin checks on (BATON_DEDUPLICATE, OpenKAT's default)"
    if result.get("deduplicate") is False:
        with_checks = "twin checks off"
    series = [(with_checks, result)]
    if "without_twin_checks" in result:
        series.insert(0, ("twin checks off (BATON_DEDUPLICATE=false)", result["without_twin_checks"]))
    return series


def _calls_per_endpoint(calls: dict[str, dict[str, int]]) -> str:
    return "; ".join(
        f"{service}: " + ", ".join(f"`{endpoint}` {count:,}" for endpoint, count in sorted(counts.items()))
        for service, counts in sorted(calls.items())
    )


def section_rescans(result: dict[str, Any]) -> list[str]:
    series = rescan_series(result)
    schedules = result["schedules"]
    rows = [
        [
            f"rescan rounds, {label}",
            num(rounds["per_second"]),
            pct(rounds["ratios"]["tasks_to_raw_insert"]),
            num(rounds["seconds"], 1),
            f"{rounds['tasks']:,}" + ("" if rounds["tasks"] == schedules else " (**incomplete**)"),
            num(rounds["ratios"]["calls_per_1000"], 1),
            f"{num(rounds['lateness_s']['p50'], 1)} / {num(rounds['lateness_s']['p99'], 1)}",
        ]
        for label, rounds in series
    ]
    raw_runs = result.get("raw_insert_runs", [])
    rows.append(
        [
            f"raw INSERT, one statement per task, one connection (mean of {baseline_moments(raw_runs)}: "
            + ", ".join(num(rate) for rate in raw_runs)
            + ")",
            num(result["raw_insert_per_second"]),
            "100%",
            "",
            "",
            "",
            "",
        ]
    )
    complete = "yes" if result["complete"] else "**NO: the measurement is invalid**"
    twice = (
        "The rounds ran twice, each on a freshly written set of the same due schedules (the first's tasks, runs "
        "and schedules removed, the listing written a poll before again): with deduplication off, the rounds "
        "alone, the work the targets were set on; and on, OpenKAT's default, where every task made is looked at "
        "for twins in the other organisations (KATalogus' configs once per boefje per poll, then, since every "
        "organisation of this estate shares the boefje's settings, one Octopoes `GET /object-clients` per task, "
        "up to 8 at a time per scheduler turn). "
        if len(series) == 2
        else ""
    )
    calls = " ".join(
        f"With {label.split(' (')[0]}: {rounds['outside_calls']:,} in all, "
        f"{num(rounds['ratios']['calls_per_1000'], 1)} per 1,000 schedules ({_calls_per_endpoint(rounds['calls'])})."
        for label, rounds in series
    )
    return [
        "## Periodic rescans: due schedules become tasks",
        "",
        measured_on(result),
        "",
        f"{schedules:,} boefje schedules over {result['organisations']} organisations, all due at the "
        f"start, for objects Octopoes holds at a sufficient level, the boefje enabled in KATalogus for every "
        "organisation (its listing written a poll before: each scheduler reads it once); KATalogus and Octopoes "
        f"stand-ins (in a process of their own) answer each call after "
        f"{num(result['latency_ms'], 1)} ms. Each organisation's boefje scheduler reads its KATalogus listing once, "
        f"then its rescan rounds read every due schedule oldest deadline first, 1,000 a page, check each page in "
        f"bulk (the catalogue in the database, one Octopoes `load_bulk` per 500 references, the grace period in "
        f"`boefje_runs`) and queue the tasks through the planner's admission path; {result['threads']} threads "
        f"share the schedulers. {twice}Every schedule became a task: {complete}.",
        "",
        *table(
            ["", "tasks/s", "ratio", "seconds", "tasks", "outside calls per 1,000 schedules", "lateness p50 / p99 (s)"],
            rows,
            "lrrrrrr",
        ),
        "Lateness after the deadline (from the start of the rounds for schedules due before it): with every "
        "schedule due at the same moment it is the time the backlog takes to drain at its rate above (oldest "
        "deadlines first in each organisation, the organisations side by side); in a steady state the jitter "
        f"spreads a day's rescans over hours, {schedules:,} a day being about {num(schedules / 86_400, 1)} a "
        "second, each handled at the next round (BATON_RESCAN_INTERVAL_SECONDS).",
        "",
        f"Outside calls. {calls} mula makes about 3,000 per 1,000 schedules (one KATalogus, one Octopoes and "
        "one Bytes call each) and, with deduplication, asks KATalogus and Octopoes again for every boefje task "
        "it pushes (is_boefje_in_other_orgs: 2,000 calls per 1,000 tasks).",
        "",
    ]
