"""The estate section: ten thousand organisations shared by `baton worker` processes (issue #33)."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, seconds, table


def _late(summary: dict[str, Any] | None) -> str:
    if not summary or not summary.get("count"):
        return "—"
    return f"{num(summary['p50_ms'])} / {num(summary['p99_ms'])}"


def _handover(case: dict[str, Any], kind: str) -> str:
    held = case.get(f"{kind}_held")
    if held is None:
        return "—"
    return f"{seconds(case.get(f'{kind}_handover_s'))} ({held:,})"


def _per_event(ingest: dict[str, Any]) -> str:
    if "workers_cpu_ms_per_event" not in ingest:
        return ""
    hung = ingest.get("given_up_as_hung")
    given_up = f"; {hung:,} schedulers given up as hung" if hung else ""
    cpu = f"{num(ingest['workers_cpu_ms_per_event'], 1)} + {num(ingest['postgres_cpu_ms_per_event'], 1)} ms"
    return f" ({cpu}{given_up})"


def _vacuums(idle: dict[str, Any]) -> str:
    runs = idle.get("schedulers_autovacuums")
    return f" ({runs} autovacuum)" if runs else ""


def _load(result: dict[str, Any]) -> str:
    start, end = result.get("load_start"), result.get("load_end")
    if not start or not end:
        return ""
    return (
        f" Load average (1 min) {num(start[0], 1)} at the start and {num(end[0], 1)} at the end on "
        f"{result.get('cores', 'the')} cores: other work shared the machine, so wall times (all running, "
        "hand-overs, ingest per second, lateness) are inflated by it; CPU seconds are each process's own."
    )


def section_estate(result: dict[str, Any]) -> list[str]:
    base = result["baseline"]
    empty = base["empty_worker"]
    renewal = result["renewal"]
    settings = result["settings"]
    rows = []
    for case in result["cases"]:
        idle = case["idle"]
        memory = case["memory"]
        ingest = case["ingest"]
        late = case["lateness"]
        rows.append(
            [
                str(case["workers"]),
                seconds(case["all_running_s"]),
                num(idle["workers_cpu_s_per_min"], 1),
                num(idle["postgres_cpu_s_per_min"], 1),
                f"**{num(idle['cpu_s_per_min'], 1)}**",
                num(idle.get("to_postgres_alone") if base["postgres_only"]["postgres_cpu_s_per_min"] >= 0.05 else None),
                num(idle["transactions_per_min"]),
                num(idle["scheduler_rows_updated_per_min"]),
                num(idle["wal_kib_per_min"]) + _vacuums(idle),
                num(idle["load_1m"], 1),
                f"{num(memory['rss_kib_per_scheduler'], 1)} / {num(memory['uss_kib_per_scheduler'], 1)}",
                (num(ingest["per_second"]) if ingest["complete"] else "incomplete") + _per_event(ingest),
                _late(late["quiet_alone"]),
                _late(late["quiet_while_busy"]) + f" ({num(late['busy_rate_per_second'])}/s)",
                _handover(case, "sigkill"),
                _handover(case, "sigterm"),
            ]
        )
    target = result["targets"]["idle_cpu_s_per_min"]
    numbers = [str(case["workers"]) for case in result["cases"]]
    counts = ", ".join(numbers[:-1]) + f" and {numbers[-1]}" if len(numbers) > 1 else numbers[0]
    postgres_only = base["postgres_only"]["postgres_cpu_s_per_min"]
    return [
        "## Ten thousand organisations: `baton worker`s at the size of a large estate",
        "",
        measured_on(result) + _load(result),
        "",
        f"{result['organisations']:,} organisations ({result['schedulers']:,} schedulers) on PostgreSQL, shared by "
        f"{counts} `baton worker` processes with default settings (poll interval {settings['poll_interval_seconds']} "
        f"s, lease {settings['lease_seconds']} s, retry period {settings['retry_period_seconds']} s, "
        f"{result['scheduler_threads']} threads per worker for its schedulers' turns). *All running*: from starting "
        "the processes until every scheduler row is `running` under a live worker. *Idle*: CPU seconds per minute "
        "used by the workers and by every PostgreSQL server process (psutil: user + system time, exited children "
        "included) over a window with no event arriving, beside the transactions, scheduler-row updates and WAL "
        "the database saw meanwhile (in brackets the autovacuum and autoanalyze runs on the schedulers table in "
        "the window, cleaning up after the claims: their CPU is PostgreSQL's), "
        f"and the load average (the machine is shared: CPU time, not wall time, is "
        f"what is compared); target ≤ {target:g} CPU-s/min, workers and PostgreSQL together. Baseline in the same "
        f"run: PostgreSQL with no Baton process {num(postgres_only, 2)} CPU-s/min; one worker with no organisation "
        f"{num(empty['workers_cpu_s_per_min'], 2)} CPU-s/min (PostgreSQL meanwhile "
        f"{num(empty['postgres_cpu_s_per_min'], 2)}), RSS {num(empty['rss_mib'])} MiB, USS {num(empty['uss_mib'])} "
        "MiB, subtracted in *KiB per scheduler*. *Ingest*: a burst of raw-file events spread over every "
        "organisation, inserted into the inbox at once: events handled per second until it is empty (in brackets "
        "the CPU the workers + PostgreSQL spent per event meanwhile, which other load on the machine does not "
        "change as it changes the rate). *Late*: "
        "one event at a time into one of the quietest 10 % of organisations, created → consumed (p50 / p99 ms), "
        "alone and while the other 90 % get events at half the measured ingest rate. Hand-overs: SIGKILL of one "
        "worker, a replacement started, then SIGTERM of another; until every scheduler runs under the rest "
        "(schedulers the stopped worker held in brackets).",
        "",
        *table(
            [
                "workers",
                "all running s",
                "idle CPU-s/min workers",
                "PostgreSQL",
                "together",
                "times PostgreSQL alone",
                "transactions/min",
                "scheduler rows updated/min",
                "WAL KiB/min",
                "load",
                "KiB per scheduler RSS / USS",
                "ingest events/s",
                "late ms, quiet alone",
                "late ms, quiet while busy",
                "SIGKILL hand-over s",
                "SIGTERM hand-over s",
            ],
            rows,
            "lrrrrrrrrrrrrrrr",
        ),
        f"Lease renewal: one process renewing all {renewal['leases']:,} leases (`Ownership.renew`, once per retry "
        f"period of {renewal['retry_period_s']:g} s) costs {num(renewal['client_cpu_ms'], 1)} ms of its CPU and "
        f"{num(renewal['postgres_cpu_ms'], 1)} ms of PostgreSQL's ({num(renewal['wall_ms'], 1)} ms wall; mean of "
        f"{renewal.get('rounds', 5)}): {num(renewal['cpu_s_per_min'], 2)} CPU-s/min at this size.",
        "",
    ]
