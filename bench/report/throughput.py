"""Sections on throughput and latency: the hot path, push, batched pops, ingest, queue depth, SQLite."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, runs, shown, table


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
        "(`pops.pop_sql()`, compiled from the code with its default parameters) through psycopg in "
        "autocommit, one connection per client. `baton serve` is one process; `BATON_WORKERS=2` runs two "
        "uvicorn workers on the same two cores; `BATON_GROUP_POPS=false` is one process in which every pop "
        "sends its own statement (the group pop off: what it gains is the difference to `HTTP, 1 process`)."
        + granian_method(result, "`HTTP, granian`", "pops"),
        "",
        *throughput_rows(result, "pops/s", "raw SQL"),
        *group_pop_gain(result),
        *granian_against_uvicorn(result, "pops/s, one process", [("", "granian_to_uvicorn")]),
    ]


def has_granian_series(result: dict[str, Any]) -> bool:
    """Whether the run measured `baton serve` on granian too (results made before it did not)."""
    return any(row["series"].endswith("granian") for row in result["series"])


def granian_method(result: dict[str, Any], series: str, requests: str) -> str:
    if not has_granian_series(result):
        return ""
    return (
        f" {series}: the same {requests} to a `baton serve` on granian instead of uvicorn "
        "(`BATON_HTTP_SERVER=granian`: the app in one worker process under granian's supervising process; a "
        "server's CPU is counted over its whole process tree)."
    )


def granian_against_uvicorn(result: dict[str, Any], unit: str, pairs: list[tuple[str, str]]) -> list[str]:
    """The rate on granian over that on uvicorn, from the same run: for each (requests, ratio label), at 1
    and 8 clients."""
    ratios = result.get("ratios", {})
    parts = [
        f"{what}{pct(ratios[f'{label}_1'])} at 1 client, {pct(ratios[f'{label}_8'])} at 8"
        for what, label in pairs
        if f"{label}_1" in ratios and f"{label}_8" in ratios
    ]
    if not parts:
        return []
    return [f"On granian / on uvicorn ({unit}): " + "; ".join(parts) + ".", ""]


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
        "psycopg clients in autocommit. Both fire the same counter trigger and index updates. As a reference, "
        "the same INSERT behind the smallest ASGI app there is (`bench/minimal_asgi.py`'s `push_app`: it parses "
        "the same request body and runs the INSERT on an async psycopg connection, one per client, with no "
        "admission, deduplication, fair tag, validation, routing or logging) under the same uvicorn."
        + statement_apps_method(result)
        + granian_method(result, "`HTTP push, granian` and `OpenKAT boefje push, granian`", "pushes"),
        "",
        *throughput_rows(result, "tasks/s", "raw INSERT"),
        *minimal_reference_lines(result.get("ratios", {}), "raw INSERT rate", "the INSERT"),
        *push_cpu_rows(result),
        *granian_against_uvicorn(
            result,
            "tasks/s",
            [
                ("Baton's push ", "granian_to_uvicorn"),
                ("OpenKAT's boefje push ", "openkat_boefje_granian_to_uvicorn"),
            ],
        ),
    ]


def statement_apps_method(result: dict[str, Any]) -> str:
    if "database_cpu_ms_per_push" not in result:
        return ""  # results from before the statement apps
    return (
        " The same app also runs Baton's own push statement instead of the INSERT (`statement_push_app`: the "
        "queue's checks, deduplication and the fair tag, as `baton serve` sends it; `statement_boefje_push_app`: "
        "mula's boefje body read by Baton's job model, the task with its schedule and run in one statement): "
        "what the statement costs beyond a plain INSERT, and what Baton's request handling costs beyond it. Around "
        "every series the CPU time of the server's process tree and of the PostgreSQL server (postmaster and every "
        "child) is read."
    )


def push_cpu_rows(result: dict[str, Any]) -> list[str]:
    server = result.get("server_cpu_ms_per_push", {})
    database = result.get("database_cpu_ms_per_push", {})
    if not database:
        return []
    names = [row["series"] for row in result["series"] if row["clients"] == 8]
    rows = [[name, num(server.get(f"{name}|8"), 2), num(database.get(f"{name}|8"), 2)] for name in names]
    return [
        "CPU per push at 8 clients (ms; the server's process tree, and the PostgreSQL server's):",
        "",
        *table(["series", "server", "PostgreSQL"], rows, "lrr"),
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
        f"A SQLite file with {result['queued_at_start']:,} queued tasks. Baseline: "
        "`baton.storage.queues.operations.pop` on a SQLAlchemy connection, one transaction per pop, client "
        "threads of one process (what the API's queue door runs on SQLite, without HTTP); then `baton serve` "
        "on the same file; and, as a reference, the same store-level pop behind the smallest ASGI app there "
        "is (`bench/minimal_asgi.py`: no routing, authentication, request ids, metrics or logging) under the "
        "same uvicorn.",
        "",
        *throughput_rows(result, "pops/s", "store-level pop"),
        *minimal_reference_lines(result.get("ratios", {}), "store-level rate", "the pop"),
    ]


def minimal_reference_lines(ratios: dict[str, Any], baseline: str, operation: str) -> list[str]:
    if "minimal_1" not in ratios:
        return []  # results from before the reference existed
    return [
        f"The reference app reaches {pct(ratios['minimal_1'])} of the {baseline} at 1 client "
        f"({pct(ratios['minimal_8'])} at 8): on this machine an HTTP round trip between a Python client and a "
        f"Python server costs more than {operation} itself, whatever the app does. `baton serve` reaches "
        f"{pct(ratios['baton_to_minimal_1'])} of the reference at 1 client ({pct(ratios['baton_to_minimal_8'])} at 8).",
        "",
    ]


def section_before_after(result: dict[str, Any]) -> list[str]:
    by_series = {(row["kind"], row["series"], row["clients"]): row for row in result["series"]}
    kinds = list(dict.fromkeys(row["kind"] for row in result["series"]))
    counts = sorted({row["clients"] for row in result["series"]})
    rows = []
    for kind in kinds:
        for count in counts:
            old, new = by_series[(kind, "before", count)], by_series[(kind, "after", count)]
            rows.append(
                [
                    kind,
                    str(count),
                    f"{num(old['per_second'])} ({runs(old) or '-'})",
                    f"{num(new['per_second'])} ({runs(new) or '-'})",
                    pct(new["ratio"]),
                    num(old.get("server_cpu_ms_per_op"), 2),
                    num(new.get("server_cpu_ms_per_op"), 2),
                ]
            )
    header = ["requests", "clients", "before /s", "after /s", "after / before", "CPU ms before", "CPU ms after"]
    return [
        "## Before and after the restructure (#40)",
        "",
        measured_on(result),
        "",
        f"The same requests through `baton serve` on this code (after) and on commit `{result['before_commit']}` "
        "(before: main just before the pop door, the planning context, the storage packages and the service "
        "faces of issue #40), each on a database of its own on the same PostgreSQL server with "
        f"{result['queued_at_start']:,} tasks queued at the start, {result['duration_s']:.0f} s per series, "
        f"{result['rounds']} round{'s' if result['rounds'] != 1 else ''} interleaved; the old code runs from "
        "`git archive` of that commit on the same Python and packages. A pop takes one task; a push is "
        "Baton's dialect (a distinct hash each) or "
        "OpenKAT's boefje push (mula's body; before, its schedule was written in a second transaction, "
        "issue #41). Server CPU per request is the `baton serve` process's.",
        "",
        *table(header, rows, "lrrrrrr"),
    ]


def section_startup(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            name,
            num(found["health_median_s"], 2),
            num(found["health_max_s"], 2),
            num(found["pop_median_s"], 2),
            num(found["pop_max_s"], 2),
        ]
        for name, found in result["series"].items()
    ]
    return [
        "## A replica's start: from its process to its first answers",
        "",
        measured_on(result),
        "",
        f"`baton serve --no-director` started {result['starts_per_series']} times per series on a migrated "
        "database, the time from starting the process to its first 200 on `/health` and to its first answered "
        f"pop; idle, and loaded: while {result['load_clients']} clients pop from another `baton serve` on the "
        f"same database (load average {result.get('load_average_loaded', float('nan')):.1f} at their end). The floor: "
        "the smallest ASGI app (bench/minimal_asgi.py's `pop_app`: the interpreter, uvicorn and psycopg, "
        "nothing of Baton's) started and asked the same way.",
        "",
        *table(["series", "/health median s", "max s", "first pop median s", "max s"], rows, "lrrrr"),
    ]
