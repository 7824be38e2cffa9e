"""Turns benchmark results (what the scenarios returned, as saved in docs/benchmarks.json) into
docs/benchmarks.md, docs/benchmarks.png, docs/benchmarks-fairness.png and docs/replication-results.md.

Targets are data: a name, where the measured value sits in the results, a threshold and a comparison.
The verdict is computed here from the measurement, never typed.

    python -m bench.report            # rewrite the documents from docs/benchmarks.json
"""

from __future__ import annotations

import json
import math
import operator
import statistics
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ANALYSIS = Path(__file__).resolve().parent / "analysis.md"

Comparison = Literal[">=", "<="]
Shown = Literal["percent", "times", "per_second", "mib", "seconds", "count"]
COMPARE: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Target:
    name: str
    measured: str  # dotted path into the results' scenarios
    threshold: float
    comparison: Comparison
    shown: Shown
    issue: str
    # Where the threshold itself was recorded, when it follows from the settings of the run (a lease
    # plus a round); `threshold` is then only the fallback.
    threshold_at: str | None = None


TARGETS = [
    Target("pop, 8 clients: `baton serve` / raw SQL", "hot_path.ratios.http_8", 0.50, ">=", "percent", "#14"),
    Target("pop, 1 client: `baton serve` / raw SQL", "hot_path.ratios.http_1", 0.35, ">=", "percent", "#14"),
    Target("push, 8 clients: HTTP / raw INSERT", "push.ratios.push_8", 0.25, ">=", "percent", "#14"),
    Target("pop limit=10 / one task per request, 8 clients", "batched.ratios.batched_8", 3.0, ">=", "times", "#14"),
    Target("RabbitMQ ingest, one scheduler (events/s)", "ingest.events_per_second", 1000.0, ">=", "per_second", "#14"),
    Target("pop p99, largest / smallest queue", "depth.ratios.pop_p99_largest_to_smallest", 2.0, "<=", "times", "#14"),
    Target(
        "`GET /queues` p99, largest / smallest queue",
        "depth.ratios.queues_p99_largest_to_smallest",
        2.0,
        "<=",
        "times",
        "#14",
    ),
    Target("SQLite pop, 1 client: HTTP / store-level", "sqlite.ratios.sqlite_1", 0.60, ">=", "percent", "#14"),
    Target("SQLite pop, 8 clients: HTTP / store-level", "sqlite.ratios.sqlite_8", 0.60, ">=", "percent", "#14"),
    Target(
        "quiet organisations' p99 dwell, fairness on / no noisy organisation",
        "fairness.ratios.dwell_p99_on_to_no_noisy",
        2.0,
        "<=",
        "times",
        "#21",
    ),
    Target(
        "pop throughput, fairness on / off, 8 clients",
        "fairness.ratios.throughput_on_to_off",
        0.85,
        ">=",
        "percent",
        "#21",
    ),
    Target(
        "fair pop p99, 1,000 / 10 backlogged organisations",
        "organisations.ratios.pop_p99_many_to_few",
        2.0,
        "<=",
        "times",
        "#21",
    ),
    Target(
        "one scheduler process (process runner child), peak resident memory",
        "director.scheduler_process.hwm_max_mib",
        40.0,
        "<=",
        "mib",
        "#16",
    ),
    Target(
        "director (thread runner), 3,000 schedulers all running",
        "workers.director_thread.converged_s",
        10.0,
        "<=",
        "seconds",
        "#16",
    ),
    Target(
        "workers: hand-over after SIGKILL of one (worst case)",
        "workers.worst.sigkill_handover_s",
        16.0,
        "<=",
        "seconds",
        "#16",
        "workers.targets.sigkill_handover_s",
    ),
    Target(
        "workers: hand-over after SIGTERM of one (worst case)",
        "workers.worst.sigterm_handover_s",
        2.0,
        "<=",
        "seconds",
        "#16",
        "workers.targets.sigterm_handover_s",
    ),
    Target("workers: writes from a superseded term", "workers.audit_totals.superseded_writes", 0, "<=", "count", "#16"),
    Target(
        "workers: stopped/failed marks by a non-owner", "workers.audit_totals.orphan_marks", 0, "<=", "count", "#16"
    ),
    Target(
        "directors: leader frozen → all running elsewhere (max)",
        "leases.harness.faults.freeze.max_s",
        17.0,
        "<=",
        "seconds",
        "#22",
        "leases.harness.faults.freeze.target_s",
    ),
    Target(
        "directors: leader's connections cut → all running (max)",
        "leases.harness.faults.cut.max_s",
        17.0,
        "<=",
        "seconds",
        "#22",
        "leases.harness.faults.cut.target_s",
    ),
    Target(
        "directors: SIGKILL of the leader → all running (max)",
        "leases.harness.faults.kill.max_s",
        2.0,
        "<=",
        "seconds",
        "#22",
        "leases.harness.faults.kill.target_s",
    ),
    Target(
        "directors: PostgreSQL restart → all running (max)",
        "leases.harness.faults.restart.max_s",
        3.0,
        "<=",
        "seconds",
        "#22",
        "leases.harness.faults.restart.target_s",
    ),
    Target(
        "directors: writes from a superseded term", "leases.harness.audit.superseded_writes", 0, "<=", "count", "#22"
    ),
    Target(
        "directors: stopped/failed marks by a non-owner", "leases.harness.audit.orphan_marks", 0, "<=", "count", "#22"
    ),
    Target(
        "Kubernetes Lease: holder frozen → Lease taken over",
        "leases.kubernetes.taken_over_s",
        17.0,
        "<=",
        "seconds",
        "#22",
        "leases.kubernetes.target_s",
    ),
]


# -- verdicts ----------------------------------------------------------------------------------------------


def lookup(scenarios: dict[str, Any], path: str) -> Any:
    value: Any = scenarios
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _flags(value: Any, key: str) -> Iterator[Any]:
    if isinstance(value, dict):
        for name, item in value.items():
            if name == key:
                yield item
            else:
                yield from _flags(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _flags(item, key)


def invalid_reason(scenario: dict[str, Any] | None) -> str | None:
    """Why a scenario's rates cannot be trusted: a queue ran dry, or ingest did not finish."""
    if scenario is None:
        return None
    if any(flag is True for flag in _flags(scenario, "ran_dry")):
        return "a queue ran dry during a measurement"
    if scenario.get("complete") is False:
        return "not every event became a task before the timeout"
    return None


@dataclass(frozen=True)
class Verdict:
    target: Target
    value: float | None
    verdict: str  # PASS, MISS, not measured, INVALID
    threshold: float


def threshold_of(target: Target, scenarios: dict[str, Any]) -> float:
    recorded = lookup(scenarios, target.threshold_at) if target.threshold_at else None
    return float(recorded) if isinstance(recorded, int | float) else target.threshold


def verdicts(scenarios: dict[str, Any]) -> list[Verdict]:
    out = []
    for target in TARGETS:
        value = lookup(scenarios, target.measured)
        scenario = scenarios.get(target.measured.split(".")[0])
        threshold = threshold_of(target, scenarios)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(Verdict(target, None, "not measured", threshold))
        elif invalid_reason(scenario):
            out.append(Verdict(target, float(value), "INVALID", threshold))
        else:
            passed = COMPARE[target.comparison](float(value), threshold)
            out.append(Verdict(target, float(value), "PASS" if passed else "MISS", threshold))
    return out


# -- formatting ------------------------------------------------------------------------------------------------


def shown(value: float | None, how: Shown) -> str:
    if value is None:
        return "—"
    if how == "percent":
        return f"{value:.0%}"
    if how == "times":
        return f"{value:.2f}x"
    if how == "mib":
        return f"{value:.1f} MiB"
    if how == "seconds":
        return "never" if math.isinf(value) else f"{value:,.1f} s"
    if how == "count":
        return f"{value:,.0f}"
    return f"{value:,.0f}/s"


def num(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def runs(row: dict[str, Any]) -> str:
    values = row.get("runs") or []
    if len(values) < 2:
        return ""
    return f"{min(values):,.0f} to {max(values):,.0f}"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(marks) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def measured_on(result: dict[str, Any]) -> str:
    meta = result.get("_meta", {})
    quick = " (`--quick`)" if meta.get("quick") else ""
    return f"*Measured {meta.get('started', '?')}{quick} in {meta.get('seconds', 0):.0f} s.*"


# -- sections ---------------------------------------------------------------------------------------------------


def throughput_rows(result: dict[str, Any], unit: str, baseline: str) -> list[str]:
    rows = [
        [
            row["series"],
            str(row["clients"]),
            num(row["per_second"]),
            runs(row),
            num(row["p50_ms"], 2),
            num(row["p99_ms"], 2),
            pct(row["ratio"]) if row["series"] != baseline else "(baseline)",
        ]
        for row in sorted(result["series"], key=lambda row: (row["clients"], row["series"] != baseline))
    ]
    header = ["series", "clients", f"{unit} (median)", "range over rounds", "p50 ms", "p99 ms", f"/ {baseline}"]
    return table(header, rows, "lrrrrrr")


def section_hot_path(result: dict[str, Any]) -> list[str]:
    return [
        "## Hot path: pop, one task per request",
        "",
        measured_on(result),
        "",
        f"One queue with {result['queued_at_start']:,} queued tasks; each series runs {result['duration_s']:.0f} s, "
        f"{result['rounds']} rounds interleaved. The baseline (raw SQL) sends Baton's own pop statement "
        "(`statements.pop_sql()`, compiled from the code with its default parameters) through psycopg in "
        "autocommit, one connection per client. `baton serve` is one process; `BATON_WORKERS=2` runs two "
        "uvicorn workers on the same two cores; `BATON_GROUP_POPS=false` is one process in which every pop "
        "sends its own statement (the group pop off: what it gains is the difference to `HTTP, 1 process`).",
        "",
        *throughput_rows(result, "pops/s", "raw SQL"),
        *group_pop_gain(result),
    ]


def group_pop_gain(result: dict[str, Any]) -> list[str]:
    """The group pop on / off, from the same run (absent from results made before it existed)."""
    by_series = {(row["series"], row["clients"]): row["per_second"] for row in result["series"]}
    gains = [
        f"{clients} client{'s' if clients > 1 else ''}: {pct(on / off)}"
        for (name, clients), off in sorted(by_series.items(), key=lambda item: item[0][1])
        if name == "HTTP, BATON_GROUP_POPS=false" and (on := by_series.get(("HTTP, 1 process", clients)))
    ]
    if not gains:
        return []
    return [
        "Group pop on / off (pops/s, one process): " + "; ".join(gains) + ". With one client no pop ever waits "
        "for another, so both send the same statements: a difference there is the machine's noise.",
        "",
    ]


def section_push(result: dict[str, Any]) -> list[str]:
    return [
        "## Push",
        "",
        measured_on(result),
        "",
        "`POST /queues/{id}/push` with a distinct hash per task (no push is deduplicated, every one takes the "
        "dedup path) into an unbounded queue, against a raw `INSERT` of the same row (with a hash) by as many "
        "psycopg clients in autocommit. Both fire the same counter trigger and index updates.",
        "",
        *throughput_rows(result, "tasks/s", "raw INSERT"),
    ]


def section_batched(result: dict[str, Any]) -> list[str]:
    return [
        "## Batched pops",
        "",
        measured_on(result),
        "",
        f"`POST /schedulers/{{queue}}/pop?limit={result['batch']}` against `POST /queues/{{queue}}/pop`, "
        f"one `baton serve` process, {result['queued_at_start']:,} queued; counted in tasks per second.",
        "",
        *throughput_rows(result, "tasks/s", "one task per request"),
    ]


def section_ingest(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            str(index + 1),
            f"{run['events']:,}",
            f"{run['tasks']:,}",
            num(run["seconds"], 2),
            num(run["per_second"]),
            num(run.get("first_to_last_task_per_second")),
        ]
        for index, run in enumerate(result["runs"])
    ]
    return [
        "## RabbitMQ ingest",
        "",
        measured_on(result),
        "",
        f"{result['events_per_run']:,} `raw_file_received` events (mime type `boefje/dns-records`, matched by one "
        "normalizer of the built-in catalogue) published to `bench__raw_file_received`, then one "
        "`NormalizerScheduler` wired as `baton.runtime` wires it (RabbitMQ source beside the HTTP inbox) is "
        "started and timed until every event is a queued task.",
        "",
        *table(["run", "events", "tasks", "seconds from start", "events/s", "first to last task, tasks/s"], rows),
        f"Median: **{num(result['events_per_second'])} events/s**; one psycopg client's raw INSERT of one task "
        f"row: {num(result['raw_insert_1_client_per_second'])} rows/s "
        f"(ratio {pct(result['ratios']['ingest_to_raw_insert'])}).",
        "",
    ]


def section_depth(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{row['queued']:,}",
            num(row["pop_p50_ms"], 2),
            num(row["pop_p99_ms"], 2),
            num(row["queues_p50_ms"], 2),
            num(row["queues_p99_ms"], 2),
            num(row["sql_pop_p50_ms"], 2),
            num(row["sql_pop_p99_ms"], 2),
        ]
        for row in result["rows"]
    ]
    ratios = result["ratios"]
    return [
        "## Queue depth",
        "",
        measured_on(result),
        "",
        f"One client, {num(result['duration_s'])} s per series, a fresh queue of each size filled with "
        f"{num(result.get('headroom'))} tasks more than that, as many as the two pop series could take at "
        "4,000 pops/s (so it never holds fewer than its nominal size).",
        "",
        *table(
            [
                "queued",
                "HTTP pop p50 ms",
                "HTTP pop p99 ms",
                "GET /queues p50 ms",
                "GET /queues p99 ms",
                "SQL pop p50 ms",
                "SQL pop p99 ms",
            ],
            rows,
        ),
        f"p99 at the largest size over p99 at the smallest: HTTP pop "
        f"{shown(ratios['pop_p99_largest_to_smallest'], 'times')}, `GET /queues` "
        f"{shown(ratios['queues_p99_largest_to_smallest'], 'times')}, SQL pop "
        f"{shown(ratios['sql_pop_p99_largest_to_smallest'], 'times')}.",
        "",
    ]


def section_sqlite(result: dict[str, Any]) -> list[str]:
    return [
        "## SQLite (the embedded default)",
        "",
        measured_on(result),
        "",
        f"A SQLite file with {result['queued_at_start']:,} queued tasks. Baseline: `baton.storage.queues.pop` on a "
        "SQLAlchemy connection, one transaction per pop, client threads of one process (what the API's SQLite "
        "executor runs, without HTTP); then `baton serve` on the same file; and, as a reference, the same "
        "store-level pop behind the smallest ASGI app there is (`bench/minimal_asgi.py`: no routing, "
        "authentication, request ids, metrics or logging) under the same uvicorn.",
        "",
        *throughput_rows(result, "pops/s", "store-level pop"),
        *minimal_reference_lines(result.get("ratios", {})),
    ]


def minimal_reference_lines(ratios: dict[str, Any]) -> list[str]:
    if "minimal_1" not in ratios:
        return []  # results from before the reference existed
    return [
        f"The reference app reaches {pct(ratios['minimal_1'])} of the store-level rate at 1 client "
        f"({pct(ratios['minimal_8'])} at 8): on this machine an HTTP round trip between a Python client and a "
        "Python server costs more than the pop itself, whatever the app does. `baton serve` reaches "
        f"{pct(ratios['baton_to_minimal_1'])} of the reference at 1 client ({pct(ratios['baton_to_minimal_8'])} at 8).",
        "",
    ]


def section_fairness(result: dict[str, Any]) -> list[str]:
    labels = {"off": "BATON_FAIRNESS=false", "on": "BATON_FAIRNESS=true", "no_noisy": "no noisy organisation"}
    rows = []
    for key, run in result["runs"].items():
        quiet_share = sum(share for org, share in run["share_of_pops"].items() if org != "noisy")
        censored = run["quiet_tasks"] - run["quiet_served"]
        at_least = "≥ " if censored else ""
        rows.append(
            [
                labels[key],
                f"{run['backlog']:,}",
                num(run["pops_per_second"]),
                f"{run['quiet_served']:,} / {run['quiet_tasks']:,}",
                at_least + num(run["quiet_dwell_p50_s"], 3),
                at_least + num(run.get("quiet_dwell_p90_s"), 3),
                at_least + num(run["quiet_dwell_p99_s"], 3),
                num(run["worst_quiet_org_p99_s"], 3),
                pct(run["share_of_pops"].get("noisy", 0.0)),
                pct(quiet_share),
            ]
        )
    ratios = result["ratios"]
    on, off = result["runs"]["on"], result["runs"]["off"]
    return [
        "## Fairness across organisations",
        "",
        measured_on(result),
        "",
        f"Ten organisations: `noisy` with a backlog at priority {result['priority']}, nine `quiet-N` each receiving "
        f"{result['pushes_per_second_per_quiet_organisation']:.0f} pushes/s at the same priority through "
        f"`POST /queues/boefje-quiet-N/push`; {result['runners']} runner clients pop "
        "`POST /schedulers/boefje/pop` in a loop. Three `baton serve` side by side: fairness off and on on one "
        "database, fairness on on a second database without `noisy`; measured in segments of "
        f"{on['duration_s']:.0f} s (+ {result['drain_s']} s for the runners to take the last pushes), "
        f"interleaved over {result['rounds']} round(s), so a drift or stall of the machine hits every series alike. "
        "Dwell = hand-out time (`modified_at`, set by the pop) minus push time (`created_at`), both set by the "
        "server. A quiet task still queued at the end of its segment counts with its age then (marked ≥: a lower "
        "bound).",
        "",
        *table(
            [
                "run",
                "noisy backlog",
                "pops/s",
                "quiet tasks served",
                "quiet dwell p50 s",
                "p90 s",
                "p99 s",
                "worst quiet org p99 s",
                "noisy share of pops",
                "quiet share of pops",
            ],
            rows,
            "lrrrrrrrrr",
        ),
        f"Quiet p99 dwell, fairness on / no noisy organisation: "
        f"{shown(ratios['dwell_p99_on_to_no_noisy'], 'times')} (median over rounds of each round's ratio; "
        f"pooled over all segments {shown(ratios.get('dwell_p99_on_to_no_noisy_pooled'), 'times')}); "
        "fairness off / no noisy: "
        f"{shown(ratios['dwell_p99_off_to_no_noisy'], 'times')} (a lower bound when tasks were left unserved).",
        "",
        "![dwell time per quiet organisation](benchmarks-fairness.png)",
        "",
        f"**Throughput cost**: pops/s of the same segments (median; runs {off['pops_per_second_runs']} off, "
        f"{on['pops_per_second_runs']} on); fairness on / off: {shown(ratios['throughput_on_to_off'], 'percent')}.",
        "",
    ]


def section_organisations(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{row['organisations']:,}",
            f"{row['queued']:,}",
            num(row["pop_p50_ms"], 2),
            num(row["pop_p99_ms"], 2),
            num(row["pops_per_second_8_clients"]),
            num(row["sql_pop_p50_ms"], 2),
            num(row["sql_pop_p99_ms"], 2),
            num(row.get("sql_pops_per_second_8_clients")),
        ]
        for row in result["rows"]
    ]
    ratios = result["ratios"]
    return [
        "## Fair pop against the number of backlogged organisations",
        "",
        measured_on(result),
        "",
        "The same number of queued tasks spread over 10 or 1,000 organisations (interleaved fair tags, one "
        "priority); `POST /schedulers/boefje/pop` with fairness on; one client for latency, 8 for throughput; "
        f"{result['duration_s']:.0f} s each, series interleaved over rounds (medians). SQL: Baton's fair pop "
        "statement by type via psycopg.",
        "",
        *table(
            [
                "backlogged organisations",
                "queued",
                "HTTP p50 ms",
                "HTTP p99 ms",
                "pops/s, 8 clients",
                "SQL p50 ms",
                "SQL p99 ms",
            ],
            rows,
        ),
        f"1,000 / 10 organisations: HTTP p99 {shown(ratios['pop_p99_many_to_few'], 'times')}, SQL p99 "
        f"{shown(ratios['sql_pop_p99_many_to_few'], 'times')}, throughput "
        f"{shown(ratios['throughput_many_to_few'], 'percent')} through HTTP, "
        f"{shown(ratios.get('sql_throughput_many_to_few'), 'percent')} in SQL (8 clients).",
        "",
    ]


def section_director(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            row["runner"],
            f"{row['organisations']:,}",
            f"{row['schedulers']:,}",
            num(row["reconcile_s"], 2),
            num(row["converged_s"], 1),
            "yes" if row["all_running"] else "NO",
            num(row["steady_reconcile_ms"], 1),
            num(row["memory_mib"]),
            num(row["per_scheduler_mib"], 2),
        ]
        for row in result["cases"]
    ]
    return [
        "## Director: reconcile time and memory",
        "",
        measured_on(result),
        "",
        "`reconcile`: the first round (starting every scheduler); `converged`: until every scheduler has written a "
        "`running` heartbeat; steady: a round with nothing to do, once every scheduler has had its first tick "
        "(one poll interval after the start); memory: resident-set growth of the director "
        "(thread runner) or the director plus its children (process runner). Not a ratio: indicative only.",
        "",
        *table(
            [
                "runner",
                "organisations",
                "schedulers",
                "reconcile s",
                "converged s",
                "all running",
                "steady round ms",
                "memory MiB",
                "MiB per scheduler",
            ],
            rows,
            "lrrrrlrrr",
        ),
        *scheduler_process_lines(result.get("scheduler_process")),
        *import_floor_lines(result.get("import_floor")),
    ]


def import_floor_lines(steps: list[dict[str, Any]] | None) -> list[str]:
    """Where a scheduler process's memory goes: fresh interpreters importing one library more each."""
    if not steps:
        return []
    rows = []
    previous: float | None = None
    for step in steps:
        added = "" if previous is None else num(step["rss_mib"] - previous, 1)
        rows.append([step["step"], num(step["rss_mib"], 1), added])
        previous = step["rss_mib"]
    libraries = next((step["rss_mib"] for step in steps if step["step"].startswith("+ structlog")), None)
    return [
        "",
        "What that memory is made of: a fresh interpreter importing, step by step, what a scheduler process "
        "imports (VmRSS after the imports, median of 3; nothing connected or run yet).",
        "",
        *table(["imports", "VmRSS MiB", "added MiB"], rows, "lrr"),
        f"The libraries the engineering standards prescribe (psycopg, SQLAlchemy, pydantic-settings, structlog, "
        f"a CLI library) take {num(libraries, 1)} MiB before a line of Baton runs: a scheduler process under "
        "40 MiB (issue #16) would have to do without some of them.",
        "",
    ]


def scheduler_process_lines(memory: dict[str, Any] | None) -> list[str]:
    if not memory or not memory.get("processes"):
        return []
    return [
        "",
        f"One scheduler process (a process-runner child running `baton standalone`, what a pod runs), over "
        f"{memory['processes']} processes, from `/proc/<pid>/status`: resident (VmRSS) "
        f"{num(memory['rss_median_mib'], 1)} MiB median, {num(memory['rss_max_mib'], 1)} MiB max; peak (VmHWM) "
        f"{num(memory['hwm_max_mib'], 1)} MiB max; not backed by files (RssAnon: what each further process "
        f"adds; the libraries' pages are shared) {num(memory.get('anon_median_mib'), 1)} MiB median. An absolute "
        "measure (issue #16's target: under 40 MiB), not a ratio.",
    ]


def _seconds(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    return "never" if math.isinf(value) else num(value, digits)


def _lease_settings(settings: dict[str, Any]) -> str:
    parts = [
        f"lease {settings['lease_s']:g} s",
        f"renew deadline {settings['renew_deadline_s']:g} s",
        f"retry period {settings['retry_period_s']:g} s",
    ]
    if "worker_round_s" in settings:
        parts.append(f"worker round {settings['worker_round_s']:g} s")
    if "scheduler_threads" in settings:
        parts.append(f"{settings['scheduler_threads']} threads per worker for its schedulers' turns")
    if "reconcile_interval_s" in settings:
        parts.append(f"reconcile interval {settings['reconcile_interval_s']:g} s")
    if "poll_interval_s" in settings:
        parts.append(f"scheduler poll interval {settings['poll_interval_s']:g} s")
    return ", ".join(parts)


def section_workers(result: dict[str, Any]) -> list[str]:
    rows = []
    for case in result["cases"]:
        shares = case["per_worker"]
        rss = case["rss_mib_per_worker"]
        audit = case["audit"]
        rows.append(
            [
                str(case["workers"]),
                _seconds(case["all_running_s"]),
                _seconds(case["balanced_s"]),
                f"{min(shares):,} / {max(shares):,}",
                num(case["balance_max_to_min"], 2),
                num(sum(rss) / len(rss)),
                num(case["rss_mib_per_scheduler"], 3),
                num(case["rss_mib_per_scheduler_above_idle"], 3),
                f"{_seconds(case['sigkill_handover_s'])} ({case['sigkill_held']:,})" if "sigkill_held" in case else "—",
                f"{_seconds(case['sigterm_handover_s'])} ({case['sigterm_held']:,})" if "sigterm_held" in case else "—",
                f"{audit['superseded_writes']} / {audit['orphan_marks']} of {audit['scheduler_writes']:,}",
            ]
        )
    director = result["director_thread"]
    one = next((case for case in result["cases"] if case["workers"] == 1), None)
    idle = result["idle_worker"]
    targets = result["targets"]
    lines = [
        "## Workers: schedulers shared by `baton worker` processes",
        "",
        measured_on(result),
        "",
        f"{result['organisations']:,} organisations ({result['schedulers']:,} schedulers) on PostgreSQL, shared by "
        f"1, 2 and 4 `baton worker` processes started together ({_lease_settings(result['settings'])}: the "
        "default lease settings; the poll interval is raised from 1 s so that 3,000 idle pollers do not become "
        "the load measured). *All running*: from starting the processes (interpreter start-up included: "
        f"{_seconds(idle['startup_s'])} s for an idle worker to register) until every scheduler row is owned by a "
        "live worker and `running`; *balanced*: until, in addition, shares differ by at most one. RSS: VmRSS from "
        f"/proc once balanced; an idle worker (no schedulers) has {num(idle['rss_mib'])} MiB, subtracted in "
        "*MiB per scheduler above idle*. With 2 and 4 workers: SIGKILL of one (its peers must wait for its "
        f"leases to expire: target lease + one worker round = {targets['sigkill_handover_s']:g} s), a "
        "replacement started as a Deployment would, then SIGTERM of another (it releases its rows: target "
        f"< {targets['sigterm_handover_s']:g} s); hand-over = until every scheduler runs under the remaining "
        "workers (schedulers the stopped worker held in brackets). Events were fed to every normalizer all "
        "along, and every write to a scheduler row, task or consumed event was logged by triggers "
        "(`baton.testing.writelog`) and judged per case.",
        "",
        *table(
            [
                "workers",
                "all running s",
                "balanced s",
                "min / max per worker",
                "max / min",
                "RSS MiB per worker",
                "MiB per scheduler",
                "MiB per scheduler above idle",
                "SIGKILL hand-over s",
                "SIGTERM hand-over s",
                "superseded / orphan marks of scheduler writes",
            ],
            rows,
            "lrrrrrrrrrr",
        ),
        f"Same run, same {result['organisations']:,} organisations: the director's thread runner (in the benchmark "
        f"process, `Director.reconcile()`) converged in **{_seconds(director['converged_s'])} s** (first reconcile "
        f"round {_seconds(director['reconcile_s'], 2)} s, {num(director['per_scheduler_mib'], 3)} MiB per "
        "scheduler)"
        + (
            f"; one worker process ran all of them after {_seconds(one['all_running_s'])} s from its start"
            if one
            else ""
        )
        + ".",
        "",
    ]
    return lines


def fault_rows(faults: dict[str, Any]) -> list[list[str]]:
    labels = {
        "freeze": "SIGSTOP of the leader past its lease, then SIGCONT",
        "cut": "the leader's connections terminated (`pg_terminate_backend`)",
        "kill": "SIGKILL of the leader (a new director started in its place)",
        "restart": "PostgreSQL restart (`pg_ctl -m fast restart`)",
    }
    rows = []
    for name, fault in faults.items():
        passed = fault["within_target"]
        new_terms = [run["new_term_after_s"] for run in fault["runs"] if run.get("new_term_after_s") is not None]
        rows.append(
            [
                f"{labels.get(name, name)} ({fault['count']} runs)",
                f"{_seconds(fault['min_s'])} / {_seconds(fault['median_s'])} / {_seconds(fault['max_s'])}",
                f"{len(new_terms)} of {fault['count']}"
                + (f", after {_seconds(statistics.median(new_terms))} s" if new_terms else ""),
                f"≤ {fault['target_s']:g} s",
                f"**{'PASS' if passed else 'MISS'}**",
            ]
        )
    return rows


def leases_tables(result: dict[str, Any]) -> list[str]:
    harness = result["harness"]
    audit = harness["audit"]
    kube = result.get("kubernetes") or {}
    lines = [
        f"{harness['directors']} `baton director --runner thread` on one PostgreSQL, {harness['organisations']} "
        f"organisations ({harness['schedulers']} schedulers), {harness['events_sent']:,} events fed to the "
        f"normalizers during {num(harness['seconds'])} s of faults; {_lease_settings(result['settings'])} "
        "(Kubernetes' controller defaults). Time from the fault until every scheduler row is `running`, held by a "
        "director that is alive and not frozen, with a heartbeat written after the fault (database clock); "
        "for the PostgreSQL restart, from the restart command.",
        "",
        *table(
            [
                "fault",
                "all schedulers running again after (min / median / max, s)",
                "new leadership term (runs; median s after the fault)",
                "target",
                "verdict",
            ],
            fault_rows(harness["faults"]),
            "lrrrl",
        ),
        "Write audit (a trigger logs every write to a scheduler row, every task inserted and every inbox event "
        "consumed, with the claim the writing transaction declared):",
        "",
        *table(
            ["check", "result"],
            [
                ["writes logged", f"{audit['writes']:,}"],
                ["writes made by schedulers under a claim", f"{audit['scheduler_writes']:,}"],
                ["claims (new terms on scheduler rows)", f"{audit['claims']:,}"],
                ["writes from a superseded term (target 0)", f"**{audit['superseded_writes']}**"],
                [
                    "stopped/failed marks by a process that did not own the row (target 0)",
                    f"**{audit['orphan_marks']}**",
                ],
            ],
            "ll",
        ),
    ]
    if kube.get("measured"):
        lines += [
            "Kubernetes Lease elector (`LeaseElector`), bounded check: two `baton director --runner kubernetes` "
            "against the fake API server of the integration tests (tests/fake_kube.py), the Lease holder "
            f"SIGSTOPped: the other took the Lease after **{_seconds(kube['taken_over_s'])} s** "
            f"(target ≤ {kube['target_s']:g} s); after SIGCONT the resumed director "
            f"{'stepped down' if kube['resumed_leader_stepped_down'] else 'did NOT log that it stepped down'}, "
            f"the Lease {'stayed' if kube['holder_after_resume_is_the_new_one'] else 'did NOT stay'} with the new "
            f"holder, and it changed holder {kube['transitions']} time(s).",
            "",
        ]
    elif kube:
        lines += [f"Kubernetes Lease elector: not measured ({kube.get('why', '?')}).", ""]
    return lines


def section_leases(result: dict[str, Any]) -> list[str]:
    return [
        "## Leases: directors under faults",
        "",
        measured_on(result),
        "",
        *leases_tables(result),
        "Also written to [replication-leases.md](replication-leases.md).",
        "",
    ]


def replication_leases_markdown(result: dict[str, Any]) -> str:
    meta = result.get("_meta", {})
    lines = [
        "# Leases and fencing: fault harness results",
        "",
        f"Generated by `python -m bench.run`{' with `--quick`' if meta.get('quick') else ''} (scenario `leases`, "
        f"`bench/scenarios/leases.py`) on {meta.get('started', '?')}; every process on this one machine. "
        "Do not edit: re-run the scenario.",
        "",
        *leases_tables(result),
    ]
    return "\n".join(lines)


def _profile_table(
    label: str, before: dict[str, Any] | None, after: dict[str, Any], key: str, after_name: str = "after"
) -> list[str]:
    width = max(len(after[key]), len(before[key]) if before else 0)
    rows = []
    for index in range(width):
        cells = []
        for side in (before, after):
            if side is None:
                continue
            entries = side[key]
            if index < len(entries):
                frame, share = entries[index]
                cells += [f"`{frame}`", f"{share:.1%}"]
            else:
                cells += ["", ""]
        rows.append(cells)
    header = (["before", "share"] if before else []) + [after_name, "share"]
    return [f"**{label}**", "", *table(header, rows, ("lr" if before else "") + "lr")]


def section_profile(result: dict[str, Any]) -> list[str]:
    after = result["after"]
    before = result.get("before")
    lines = [
        "## Profile: where a pop's time goes (before / after)",
        "",
        measured_on(result),
        "",
        f"`py-spy record -r {result['rate_hz']} -d {result['seconds']} -f raw` on the `baton serve` process while "
        f"{result['clients']} clients pop one task per request from a filled queue. "
        f'"Before" is commit {result["old_commit"]} (the code before the restructure: sync endpoints, the ORM, '
        'a thread hop per request) on a fresh database of its own on the same PostgreSQL server; "after" is this '
        "code. py-spy pauses the process for each sample (its default), which slows both versions, the one with "
        "more threads more; so pops/s are also given unprofiled, measured just before. Samples whose innermost "
        "frame is a blocked thread (waiting for work, a lock, or a synchronous PostgreSQL answer) are counted "
        "as waiting and left out of the tables, whose shares are of the remaining (busy) samples.",
        "",
    ]
    if before is None:
        lines += [f"Before: not measured ({result.get('before_skipped', 'skipped')}).", ""]
    lines += table(
        ["", "pops/s, 8 clients, unprofiled", "pops/s while profiled", "p50 ms profiled", "samples", "waiting"],
        [
            [
                name,
                num(side.get("pops_per_second_unprofiled")),
                num(side["pops_per_second"]),
                num(side["p50_ms"], 2),
                f"{side['samples']:,}",
                pct(side.get("waiting_share")),
            ]
            for name, side in (("before", before), ("after", after))
            if side is not None
        ],
    )
    lines += _profile_table("Self time by component", before, after, "by_component")
    lines += _profile_table("Top self frames", before, after, "top_self")
    lines += _profile_table(
        "Top inclusive frames (frames that spend 95 % or more of their time in a single callee, such as the "
        "middleware chain, left out)",
        before,
        after,
        "top_inclusive",
    )
    return lines + section_ingest_profile(result)


def section_ingest_profile(result: dict[str, Any]) -> list[str]:
    ingest = result.get("ingest")
    if not ingest:
        return []
    lines = [
        "### Where an ingested event's time goes",
        "",
        f"py-spy (100 Hz) on the benchmark process itself while one `NormalizerScheduler` (a thread of it, as "
        f"in the ingest scenario) turned {ingest['events']:,} RabbitMQ events into tasks "
        f"({num(ingest['per_second'])} events/s while profiled). Shares of busy samples of the whole process "
        "(the benchmark's own thread that watches the queue's counter is in there too, mostly asleep).",
        "",
    ]
    lines += _profile_table("Top inclusive frames", None, ingest, "top_inclusive", "frame")
    lines += _profile_table("Top self frames", None, ingest, "top_self", "frame")
    return lines


SECTIONS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "hot_path": section_hot_path,
    "push": section_push,
    "batched": section_batched,
    "ingest": section_ingest,
    "depth": section_depth,
    "sqlite": section_sqlite,
    "fairness": section_fairness,
    "organisations": section_organisations,
    "director": section_director,
    "workers": section_workers,
    "leases": section_leases,
    "profile": section_profile,
}


def section_targets(found: list[Verdict], scenarios: dict[str, Any]) -> list[str]:
    rows = [
        [
            v.target.name,
            shown(v.value, v.target.shown),
            f"{v.target.comparison} {shown(v.threshold, v.target.shown)}",
            f"**{v.verdict}**",
            v.target.issue,
            f"`{v.target.measured}`",
        ]
        for v in found
    ]
    lines = [
        "## Targets",
        "",
        "Computed by `bench/report.py` from the measurements below (each a ratio against a baseline of the same "
        "run, except ingest's absolute rate, a scheduler process's memory and the lease scenarios' times and "
        "counts, whose thresholds follow from the lease settings of the run).",
        "",
        *table(["target", "measured", "threshold", "verdict", "issue", "from"], rows, "lrrlll"),
    ]
    for name in sorted({v.target.measured.split(".")[0] for v in found}):
        reason = invalid_reason(scenarios.get(name))
        if reason:
            lines += [f"- `{name}`: INVALID because {reason}.", ""]
    return lines


def section_misses(found: list[Verdict]) -> list[str]:
    misses = [v for v in found if v.verdict in ("MISS", "INVALID")]
    lines = ["## Misses", ""]
    if not misses:
        return [*lines, "None in this run.", ""]
    for v in misses:
        if v.value is None:
            continue
        gap = f" ({v.value / v.threshold:.2f} of the threshold)" if v.threshold and math.isfinite(v.value) else ""
        lines.append(
            f"- {v.target.name}: {shown(v.value, v.target.shown)} against "
            f"{v.target.comparison} {shown(v.threshold, v.target.shown)}{gap}."
        )
    return [*lines, ""]


def benchmarks_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    scenarios = results["scenarios"]
    found = verdicts(scenarios)
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{meta['command']}`, last run {meta['finished']} on {meta['machine']}; PostgreSQL "
        f"{meta['postgresql']} and RabbitMQ on the same machine as the load generator and Baton. Load average "
        f"(1 min) {meta['load_before']:.2f} before and {meta['load_after']:.2f} after the run: other work ran on "
        "this machine at the same time, which is why every claim below is a ratio against a baseline measured "
        "in the same run, series interleaved round by round. Absolute numbers only indicate an order of magnitude.",
        "",
        "**Method.** `bench/loadgen.py`: each client is a thread in a tight loop (`http.client` keep-alive "
        "connections for HTTP, psycopg connections in autocommit for SQL), clients spread over up to 4 spawned "
        "processes; a series reports tasks moved per second over its duration (median over rounds) and the "
        "latency of each request. A series whose queue ran dry is marked invalid. Auth off (`BATON_AUTH=off`), "
        "`baton serve --no-director`. Scenarios: `bench/scenarios/`; raw results: "
        "[benchmarks.json](benchmarks.json); re-run with `bash bench/run.sh` (`--quick` for a smoke run).",
        "",
        "![pop throughput (log scale) including the batched series; latency against queue depth; push, ingest "
        "and SQLite](benchmarks.png)",
        "",
        *section_targets(found, scenarios),
        *section_misses(found),
    ]
    for name, section in SECTIONS.items():
        if name in scenarios:
            lines += section(scenarios[name])
    if "replication" in scenarios:
        lines += [
            "## Replication",
            "",
            "The chaos scenario and throughput per API replica count: "
            "[replication-results.md](replication-results.md); findings: [replication.md](replication.md).",
            "",
        ]
    if ANALYSIS.exists():
        lines += [ANALYSIS.read_text().rstrip(), ""]
    return "\n".join(lines)


# -- replication ----------------------------------------------------------------------------------------------


def replication_markdown(result: dict[str, Any]) -> str:
    chaos = result["chaos"]
    throughput = result["throughput"]
    meta = result.get("_meta", {})
    lines = [
        "# Replication harness results",
        "",
        f"Generated by `bash bench/run.sh{' --quick' if meta.get('quick') else ''}` (scenario `replication`) on "
        f"{meta.get('started', '?')}; every process on this one machine.",
        "",
        "## Chaos run",
        "",
        f"{chaos['api_replicas']} API replicas, 2 directors (process runner), {chaos['clients']} job-runner clients, "
        f"{chaos['events_sent']} events posted while these were SIGKILLed: {', '.join(chaos['kills'])}.",
        "",
        "| check | result |",
        "|---|---|",
        f"| every event became exactly one task | {chaos['tasks']} tasks for {chaos['events_sent']} events; "
        f"{chaos['duplicated_events']} duplicated, {chaos['missing_events']} missing, "
        f"{chaos['unexpected_tasks']} unexpected |",
        f"| no task held by two clients at once | {chaos['handed_out_twice_at_once']} overlaps |",
        f"| none lost, all eventually completed | {'yes' if chaos['all_completed'] else 'NO'}; final statuses "
        f"{chaos['statuses']} |",
        f"| tasks re-queued by stuck-task recovery | {chaos['recovered']} (handed out again after recovery: "
        f"{chaos['handed_out_again_after_recovery']}) |",
        f"| director failover (SIGKILL of the leader → new leader renewed) | "
        f"{num(chaos.get('failover_seconds'), 2)} s |",
        f"| client requests that hit a dead replica and were retried elsewhere | {chaos['client_connection_errors']} |",
        "",
        f"## Throughput per API replica count ({throughput['clients']} clients, {throughput['batch']} task(s) per "
        f"pop, pop + 2 PATCHes each, {throughput['tasks']:,} tasks)",
        "",
        "| API replicas | tasks completed/s | ratio to 1 replica |",
        "|---:|---:|---:|",
    ]
    for replicas, rate in throughput["completed_per_second"].items():
        lines.append(f"| {replicas} | {rate:,.0f} | {throughput['ratio_to_one_replica'][replicas]:.2f} |")
    return "\n".join(lines) + "\n"


# -- plots ----------------------------------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_overview(scenarios: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 5))
    series: dict[str, list[tuple[int, float]]] = {}
    for name, label in (("hot_path", "{}"), ("batched", "{} (batched scenario)")):
        for row in scenarios.get(name, {}).get("series", []):
            series.setdefault(label.format(row["series"]), []).append((row["clients"], row["per_second"]))
    for name, points in sorted(series.items()):
        points.sort()
        style = "--" if "batched" in name else "-"
        left.plot([c for c, _ in points], [r for _, r in points], style, marker="o", label=name)
    left.set_yscale("log")
    left.set_xscale("log", base=2)
    left.set_xticks([1, 8], ["1", "8"])
    left.set_xlabel("concurrent clients")
    left.set_ylabel("tasks popped per second (log)")
    left.set_title("Pop throughput")
    left.legend(fontsize=7)
    depth = scenarios.get("depth", {}).get("rows", [])
    if depth:
        sizes = [row["queued"] for row in depth]
        for key, label in (
            ("pop_p50_ms", "HTTP pop p50"),
            ("pop_p99_ms", "HTTP pop p99"),
            ("queues_p50_ms", "GET /queues p50"),
            ("queues_p99_ms", "GET /queues p99"),
            ("sql_pop_p50_ms", "SQL pop p50"),
            ("sql_pop_p99_ms", "SQL pop p99"),
        ):
            middle.plot(sizes, [row[key] for row in depth], marker="o", label=label)
        middle.set_xscale("log")
        middle.set_yscale("log")
        middle.set_xlabel("queued tasks (log)")
        middle.set_ylabel("latency ms (log), one client")
        middle.set_title("Latency against queue depth")
        middle.legend(fontsize=7)
    bars: list[tuple[str, float]] = []
    for row in scenarios.get("push", {}).get("series", []):
        bars.append((f"{row['series']}, {row['clients']} cl.", row["per_second"]))
    if "ingest" in scenarios:
        bars.append(("RabbitMQ ingest, 1 scheduler", scenarios["ingest"]["events_per_second"]))
        bars.append(("raw INSERT, 1 client", scenarios["ingest"]["raw_insert_1_client_per_second"]))
    for row in scenarios.get("sqlite", {}).get("series", []):
        bars.append((f"SQLite {row['series']}, {row['clients']} cl.", row["per_second"]))
    if bars:
        right.barh([label for label, _ in bars], [value for _, value in bars])
        right.set_xscale("log")
        right.set_xlabel("per second (log)")
        right.set_title("Push, ingest, SQLite pop")
        right.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_fairness(result: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    runs = result["runs"]
    titles = {"off": "BATON_FAIRNESS=false", "on": "BATON_FAIRNESS=true", "no_noisy": "no noisy organisation"}
    figure, axes = plt.subplots(1, len(runs), figsize=(16, 4.8), sharey=True)
    organisations = sorted({point[0] for run in runs.values() for point in run["points"]})
    colours = {org: plt.cm.tab10(index % 10) for index, org in enumerate(organisations)}
    for axis, (key, run) in zip(axes, runs.items(), strict=True):
        for org in organisations:
            served = [(p[1], p[2]) for p in run["points"] if p[0] == org and p[3]]
            waiting = [(p[1], p[2]) for p in run["points"] if p[0] == org and not p[3]]
            if served:
                axis.scatter(*zip(*served, strict=True), s=6, color=colours[org], label=org)
            if waiting:
                axis.scatter(*zip(*waiting, strict=True), s=10, facecolors="none", edgecolors=colours[org])
        axis.set_yscale("log")
        axis.set_xlabel("push time, s from the start of its segment")
        axis.set_title(f"{titles[key]} ({run['pops_per_second']:,.0f} pops/s)")
    axes[0].set_ylabel("dwell s (push → hand-out; hollow: not handed out by the end)")
    axes[-1].legend(fontsize=7, markerscale=2, loc="upper left")
    figure.suptitle("Quiet organisations' dwell time while one organisation has a backlog")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(results: dict[str, Any], docs: Path = DOCS) -> list[Path]:
    """Write every document the results allow; returns the paths written."""
    scenarios = results["scenarios"]
    written = []
    markdown = docs / "benchmarks.md"
    markdown.write_text(benchmarks_markdown(results))
    written.append(markdown)
    plot_overview(scenarios, docs / "benchmarks.png")
    written.append(docs / "benchmarks.png")
    if "fairness" in scenarios:
        plot_fairness(scenarios["fairness"], docs / "benchmarks-fairness.png")
        written.append(docs / "benchmarks-fairness.png")
    if "replication" in scenarios:
        replication = docs / "replication-results.md"
        replication.write_text(replication_markdown(scenarios["replication"]))
        written.append(replication)
    if "leases" in scenarios:
        leases = docs / "replication-leases.md"
        leases.write_text(replication_leases_markdown(scenarios["leases"]))
        written.append(leases)
    return written


def publish(results: dict[str, Any], results_file: Path | None = None, docs: Path = DOCS) -> list[Path]:
    """The results (to `results_file`, when given) and every document, beside it (else in `docs`), all
    or nothing: rendered into a staging folder there first, then each moved over its old copy."""
    target = results_file.parent if results_file else docs
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".bench-staging-") as folder:
        staging = Path(folder)
        staged = write(results, staging)
        if results_file is not None:
            (staging / results_file.name).write_text(json.dumps(results, indent=1, default=str) + "\n")
            staged.append(staging / results_file.name)
        published = []
        for path in staged:
            path.replace(target / path.name)
            published.append(target / path.name)
    return published


def main() -> None:
    results = json.loads((DOCS / "benchmarks.json").read_text())
    for path in publish(results):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
