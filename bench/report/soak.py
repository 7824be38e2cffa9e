"""The soak section (issue #42) and its plot, docs/benchmarks-soak.png: what ran, the time mapping, the
faults, the end-of-run checks, and every minute's memory, descriptors, latencies, lateness, tables and
logs."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.report.formatting import measured_on, num, table

FAULT_NAMES = {
    "outside_service_down": "KATalogus down",
    "worker_sigkill": "worker SIGKILLed",
    "api_restart": "API replica SIGKILLed and restarted",
    "rabbitmq_restart": "RabbitMQ restarted",
    "postgres_restart": "PostgreSQL restarted",
}
LATENCY_NAMES = {
    "pop": "pop (not waiting)",
    "push": "push (rocky's manual run)",
    "patch": "PATCH",
    "read": "rocky's reads",
}
TABLES_SHOWN = ("tasks", "events", "schedules", "boefje_runs", "pop_receipts", "pending_settlements", "schedulers")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}" if seconds < 600 else f"{seconds / 60:.0f}"


def _mapping(plan: dict[str, Any]) -> str:
    parts = [f"{row['hour']:02d}:00 at minute {minutes(row['from_s'])}" for row in plan["mapping"]]
    return "; ".join(parts)


def _settings(settings: dict[str, str]) -> str:
    return ", ".join(f"`{name}={value}`" for name, value in settings.items())


def _faults(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for fault in sorted(result["faults"], key=lambda f: f["at"]):
        took = fault["ended"] - fault["at"]
        what = FAULT_NAMES.get(fault["kind"], fault["kind"])
        extra = ""
        if "ready_after_s" in fault:
            extra = f"ready again after {fault['ready_after_s']:.1f} s"
        elif "down_s" in fault:
            extra = f"down for {fault['down_s']:.1f} s (the restart command)"
        elif fault["kind"] == "outside_service_down":
            extra = f"refusing connections for {took:.0f} s"
        elif fault["kind"] == "worker_sigkill":
            extra = "a replacement started at once"
        rows.append([minutes(fault["at"]), what, extra + (f"; {fault['error']}" if "error" in fault else "")])
    return rows


def _checks(result: dict[str, Any]) -> list[list[str]]:
    shown = {True: "**PASS**", False: "**MISS**", None: "not judged"}
    return [[check["name"], shown[check["passed"]], check["detail"]] for check in result["checks"]]


def process_rows(result: dict[str, Any]) -> list[list[str]]:
    """Per process: memory at the end of warm-up and at the end, descriptors, sockets and threads (range)."""
    plan = result["plan"]
    names: list[str] = []
    for sample in result["samples"]:
        names += [name for name in sample["processes"] if name not in names]
    rows = []
    for name in names:
        series = [(s["at"], s["processes"][name]) for s in result["samples"] if name in s["processes"]]
        after = [p for at, p in series if at >= plan["warm_up_s"]] or [p for _, p in series]
        first, last = after[0], series[-1][1]

        def span(key: str, values: list[dict[str, Any]] = after) -> str:
            return f"{min(v[key] for v in values):,.0f}-{max(v[key] for v in values):,.0f}"

        rows.append(
            [
                name,
                f"{first['rss_mib']:.1f} → {last['rss_mib']:.1f}",
                f"{first['uss_mib']:.1f} → {last['uss_mib']:.1f}",
                span("fds"),
                span("connections"),
                span("threads"),
                held(result, name, series),
                num(cores(series), 2),
            ]
        )
    return rows


def held(result: dict[str, Any], name: str, series: list[tuple[float, dict[str, Any]]]) -> str:
    """The schedulers a worker held at its last sample: boefje / normalizer / report."""
    pid = series[-1][1].get("pid")
    if pid is None or not name.startswith("worker"):
        return ""
    for sample in reversed(result["samples"]):
        found = sample.get("postgres", {}).get("schedulers_held", {}).get(str(pid))
        if found:
            return " / ".join(str(found.get(kind, 0)) for kind in ("boefje", "normalizer", "report"))
    return ""


def other_rows(result: dict[str, Any]) -> list[list[str]]:
    """The stand-ins' process and the load generator: not Baton, but on the same two cores."""
    rows = []
    for name, label in (("standins", "OpenKAT stand-ins (not Baton)"), ("load", "load generator (not Baton)")):
        series = [(s["at"], s["others"][name]) for s in result["samples"] if name in s.get("others", {})]
        if len(series) < 2:
            continue
        first, last = series[0][1], series[-1][1]
        rows.append(
            [
                label,
                f"{first['rss_mib']:.1f} → {last['rss_mib']:.1f}",
                f"{first['uss_mib']:.1f} → {last['uss_mib']:.1f}",
                "",
                "",
                "",
                "",
                num(cores(series), 2),
            ]
        )
    return rows


def load_and_lateness(result: dict[str, Any]) -> str:
    """How rescan lateness followed the machine's load, minute by minute (after warm-up)."""
    pairs = [
        (s["load_1m"], s["lateness"]["rescan"]["p50_ms"] / 1000)
        for s in result["samples"]
        if s["at"] >= result["plan"]["warm_up_s"] and s["lateness"]["rescan"]["p50_ms"] is not None
    ]
    if len(pairs) < 4:
        return ""
    loads = sorted(load for load, _ in pairs)
    middle = statistics.median(loads)
    calm = [late for load, late in pairs if load < middle]
    busy = [late for load, late in pairs if load >= middle]
    correlation = statistics.correlation([p[0] for p in pairs], [p[1] for p in pairs])
    every = result["plan"]["sample_every_s"]
    return (
        f" rescan lateness followed the machine's load (Pearson r = {correlation:.2f} over the {len(pairs)} samples "
        f"after warm-up, one every {every:g} s): in the samples with a load average below its median "
        f"({middle:.1f}) the median lateness was {statistics.median(calm) if calm else float('nan'):.1f} s, in the "
        f"others {statistics.median(busy) if busy else float('nan'):.1f} s."
    )


def cores(series: list[tuple[float, dict[str, Any]]]) -> float | None:
    """CPU-seconds per second over the process's samples."""
    if len(series) < 2 or series[-1][0] <= series[0][0]:
        return None
    return (series[-1][1]["cpu_s"] - series[0][1]["cpu_s"]) / (series[-1][0] - series[0][0])


def baton_cores(result: dict[str, Any]) -> float | None:
    """Baton's processes and PostgreSQL together: CPU-seconds per second of the run."""
    samples = result["samples"]
    if len(samples) < 2:
        return None
    used = 0.0
    names = {name for s in samples for name in s["processes"]}
    for name in names:
        series = [(s["at"], s["processes"][name]) for s in samples if name in s["processes"]]
        if len(series) >= 2:
            used += series[-1][1]["cpu_s"] - series[0][1]["cpu_s"]
    span = samples[-1]["at"] - samples[0]["at"]
    return used / span + (postgres_cores(samples) or 0.0) if span > 0 else None


def postgres_cores(samples: list[dict[str, Any]]) -> float | None:
    """PostgreSQL's CPU-seconds per second, over the samples of each server (a restart starts a new one)."""
    used = elapsed = 0.0
    previous: dict[str, Any] | None = None
    for sample in samples:
        postgres = sample.get("postgres", {})
        if "cpu_s" not in postgres:
            continue
        if previous is not None and previous["postmaster"] == postgres["postmaster"]:
            used += postgres["cpu_s"] - previous["cpu_s"]
            elapsed += sample["at"] - previous["at"]
        previous = {**postgres, "at": sample["at"]}
    return float(used / elapsed) if elapsed else None


def _tables(result: dict[str, Any]) -> list[list[str]]:
    plan = result["plan"]
    (a, b), (c, d) = plan["first_window_s"], plan["last_window_s"]

    def mean(name: str, key: str, start: float, end: float) -> float | None:
        values = [
            s["postgres"]["tables"][name][key]
            for s in result["samples"]
            if start <= s["at"] < end and name in s.get("postgres", {}).get("tables", {})
        ]
        return statistics.mean(values) if values else None

    rows = []
    for name in TABLES_SHOWN:
        dead = [
            s["postgres"]["tables"][name]["dead"]
            for s in result["samples"]
            if name in s.get("postgres", {}).get("tables", {})
        ]
        if not dead:
            continue
        rows.append(
            [
                f"`{name}`",
                f"{num(mean(name, 'live', a, b))} → {num(mean(name, 'live', c, d))}",
                f"{num(_kib(mean(name, 'total_kib', a, b)), 1)} → {num(_kib(mean(name, 'total_kib', c, d)), 1)}",
                f"{max(dead):,}",
            ]
        )
    return rows


def _kib(value: float | None) -> float | None:
    return None if value is None else value / 1024


def _latencies(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for kind, windows in result["windows"].items():
        counts = sum(s["latency"].get(kind, {}).get("count", 0) for s in result["samples"])
        ratio = windows.get("ratio")
        rows.append(
            [
                LATENCY_NAMES.get(kind, kind),
                f"{counts:,}",
                num(windows["first_ms"]),
                num(windows["last_ms"]),
                f"{ratio:.2f}x" if ratio else "—",
            ]
        )
    return rows


def client_errors(result: dict[str, Any]) -> str:
    """What the clients met, by kind, summed over the run (each retried on the other replica)."""
    total: dict[str, int] = {}
    for sample in result["samples"]:
        for kind, count in sample.get("client_errors", {}).items():
            total[kind] = total.get(kind, 0) + count
    said = ", ".join(f"{kind} ({count:,})" for kind, count in sorted(total.items(), key=lambda item: -item[1]))
    return f"Errors the clients met (each call retried until answered): {said or 'none'}."


def event_lateness(result: dict[str, Any]) -> str:
    plan = result["plan"]
    windows = {"first": plan["first_window_s"], "last": plan["last_window_s"]}
    parts = []
    for label, (start, end) in windows.items():
        inside = [s["lateness"]["event"] for s in result["samples"] if start <= s["at"] < end]
        p50 = [x["p50_ms"] for x in inside if x["p50_ms"] is not None]
        p99 = [x["p99_ms"] for x in inside if x["p99_ms"] is not None]
        if p50 and p99:
            parts.append(f"{label} window p50 {statistics.median(p50) / 1000:.2f} s, p99 up to {max(p99) / 1000:.2f} s")
    if not parts:
        return ""
    return "Event to task (a message published to its task made; per sample): " + "; ".join(parts) + "."


def _logs(result: dict[str, Any]) -> str:
    per_process: dict[str, list[int]] = {}
    for sample in result["samples"]:
        for name, counts in sample["logs"].items():
            per_process.setdefault(name, []).append(counts.get("lines", 0))
    every = result["plan"]["sample_every_s"] / 60
    rates = ", ".join(f"{name} {statistics.mean(lines) / every:,.0f}" for name, lines in per_process.items() if lines)
    kinds = ", ".join(f"{kind} ({count})" for kind, count in result["log_kinds"].items())
    return f"Log lines per minute (mean): {rates}. Warnings and errors by kind: {kinds or 'none'}."


def section_soak(result: dict[str, Any]) -> list[str]:
    plan = result["plan"]
    load = [s["load_1m"] for s in result["samples"]]
    postgres = postgres_cores(result["samples"])
    retention = result["retention"]
    acts = (
        ""
        if retention["acts_within_run"]
        else (
            f" Retention's horizon ({minutes(retention['horizon_s'])} minutes; wanted: "
            f"{minutes(retention['wanted_horizon_s'])} minutes, a sixth of the run) is longer than the run, so it "
            "cannot remove a task during it."
        )
    )
    length = "an hour" if plan["seconds"] == 3600 else f"{minutes(plan['seconds'])} minutes"
    judged = (
        ""
        if not plan["quick"]
        else " A smoke run: the windows are too short to compare, so memory, p99 and tables are not judged."
    )
    return [
        f"## Soak: a day of OpenKAT in {length}",
        "",
        measured_on(result)
        + f" Load average (1 min) {num(statistics.mean(load), 1) if load else '—'} over the run (from "
        f"{num(min(load), 1) if load else '—'} to {num(max(load), 1) if load else '—'}) on a shared 2-core machine.",
        "",
        f"A run of {minutes(plan['seconds'])} minutes is one simulated day of OpenKAT (each day-long rhythm "
        f"divided by {plan['factor']:g}): {_mapping(plan)}. Baton's settings for it: {_settings(result['settings'])}"
        f" (rescan rounds and KATalogus polls never below a second).{acts} Everything else is at its default."
        f"{judged}",
        "",
        f"PostgreSQL (a cluster of the run's own), RabbitMQ (a virtual host of its own), two `baton serve "
        f"--no-director` API replicas and two `baton worker`s, with KATalogus, Octopoes and Bytes as stand-ins "
        f"(`harness/standins/`, a process of their own) for {plan['organisations']} organisations that KATalogus "
        f"lists; every Baton process logs JSON at level info to a file. The estate starts as after a day: each "
        f"organisation's {plan['hostnames_per_organisation']} hostnames have a schedule for each of two boefjes "
        f"({plan['schedules']:,} in all), due over the coming simulated day. The steady mix (bench/soak/load.py): "
        f"Octopoes publishes {plan['mutations_per_second']:g} new objects a second (`scan_profile_mutations`), "
        f"each a task of both boefjes (and a twin where the organisation's twin holds it too: "
        f"{plan['twin_organisations']} organisations in pairs); {plan['boefje_runners']} boefje and "
        f"{plan['normalizer_runners']} normalizer runners pop one task (without waiting after a task, with a "
        f"{plan['long_poll_seconds']:g} s long-poll after an empty answer), PATCH `running`, then `completed` or "
        "(one in twenty) `failed`; each boefje's result goes to Bytes and Bytes' `raw_file_received` follows "
        f"(an error file for a failed boefje: no normalizer task); rocky reads {plan['reads_per_second']:g} task "
        f"and schedule pages a second and pushes {plan['manual_runs_per_second']:g} manual runs a second; a third "
        f"boefje is enabled in KATalogus for one more organisation {plan['backfills']} times (a backfill of its "
        f"{plan['addresses_per_organisation']} addresses each). Faults, one at a time between the first and the "
        f"last window (warm-up the first {minutes(plan['warm_up_s'])} minutes; windows compared: minutes "
        f"{minutes(plan['first_window_s'][0])}-{minutes(plan['first_window_s'][1])} and "
        f"{minutes(plan['last_window_s'][0])}-{minutes(plan['last_window_s'][1])}):",
        "",
        *table(["minute", "fault", ""], _faults(result), "rll"),
        f"After the run, no new events; the runners took what was queued ({result['drain_s']:.0f} s), then the checks:",
        "",
        *table(["check", "verdict", "measured"], _checks(result), "lll"),
        f"Baton's processes and PostgreSQL used {num(baton_cores(result), 2)} of the machine's 2 cores on average "
        f"(PostgreSQL {num(postgres, 2)}){';' + load_and_lateness(result) if load_and_lateness(result) else '.'}",
        "",
        "Every Baton process (memory after warm-up → at the end, MiB; ranges after warm-up; CPU cores used on "
        "average over its life), and beside them the stand-ins and the load generator:",
        "",
        *table(
            [
                "process",
                "RSS MiB",
                "USS MiB",
                "file descriptors",
                "sockets",
                "threads",
                "schedulers held (boefje / normalizer / report)",
                "cores",
            ],
            [*process_rows(result), *other_rows(result)],
            "lrrrrrrr",
        ),
        "Latencies the clients saw, p99 in the first and the last window (ms):",
        "",
        *table(["request", "requests", "first window p99", "last window p99", "last / first"], _latencies(result)),
        "Tables (live rows and total size with indexes, mean of each window; most dead tuples seen):",
        "",
        *table(["table", "rows, first → last window", "MiB, first → last window", "most dead tuples"], _tables(result)),
        " ".join(part for part in (event_lateness(result), client_errors(result), _logs(result)) if part),
        "",
        "![soak: memory, descriptors, latencies, lateness, tables and logs per minute](benchmarks-soak.png)",
        "",
    ]


# -- the plot ------------------------------------------------------------------------------------------------


def plot_soak(result: dict[str, Any], path: Path) -> None:
    from bench.report.plots import _pyplot

    plt = _pyplot()
    samples = result["samples"]
    at = [s["at"] / 60 for s in samples]
    figure, axes = plt.subplots(2, 3, figsize=(18, 9))
    (memory, descriptors, latency), (lateness, tables, logs) = axes
    names: list[str] = []
    for sample in samples:
        names += [name for name in sample["processes"] if name not in names]
    for index, name in enumerate(names):
        colour = plt.cm.tab10(index % 10)
        points = [(s["at"] / 60, s["processes"][name]) for s in samples if name in s["processes"]]
        xs = [x for x, _ in points]
        memory.plot(xs, [p["rss_mib"] for _, p in points], color=colour, label=f"{name} RSS")
        memory.plot(xs, [p["uss_mib"] for _, p in points], color=colour, linestyle="--", label=f"{name} USS")
        descriptors.plot(xs, [p["fds"] for _, p in points], color=colour, label=f"{name} fds")
        descriptors.plot(
            xs, [p["connections"] for _, p in points], color=colour, linestyle=":", label=f"{name} sockets"
        )
    memory.set_ylabel("MiB")
    memory.set_title("Memory per process (RSS, USS dashed)")
    descriptors.set_title("File descriptors, sockets (dotted)")
    for index, kind in enumerate(("pop", "push", "patch", "read")):
        colour = plt.cm.tab10(index)
        for key, style in (("p50_ms", "--"), ("p99_ms", "-")):
            points = [(s["at"] / 60, s["latency"][kind][key]) for s in samples if s["latency"].get(kind, {}).get(key)]
            if points:
                latency.plot(*zip(*points, strict=True), style, color=colour, label=f"{kind} {key[:3]}")
    latency.set_yscale("log")
    latency.set_ylabel("ms (log)")
    latency.set_title("Latency per minute (p99, p50 dashed)")
    for index, kind in enumerate(("event", "rescan")):
        colour = plt.cm.tab10(index)
        for key, style in (("p50_ms", "--"), ("p99_ms", "-")):
            points = [(s["at"] / 60, s["lateness"][kind][key] / 1000) for s in samples if s["lateness"][kind][key]]
            if points:
                lateness.plot(*zip(*points, strict=True), style, color=colour, label=f"{kind} {key[:3]}")
    lateness.set_ylabel("s")
    lateness.set_title("Event → task and deadline → rescan task (p99, p50 dashed)")
    for index, name in enumerate(TABLES_SHOWN[:4]):
        colour = plt.cm.tab10(index)
        points = [
            (s["at"] / 60, s["postgres"]["tables"][name])
            for s in samples
            if name in s.get("postgres", {}).get("tables", {})
        ]
        if points:
            xs = [x for x, _ in points]
            tables.plot(xs, [p["total_kib"] / 1024 for _, p in points], color=colour, label=f"{name} MiB")
            tables.plot(xs, [p["dead"] / 1000 for _, p in points], ":", color=colour, label=f"{name} dead (k)")
    tables.set_title("Tables with indexes (MiB), dead tuples (thousands, dotted)")
    every = result["plan"]["sample_every_s"] / 60
    for index, name in enumerate(names):
        colour = plt.cm.tab10(index % 10)
        points = [(s["at"] / 60, s["logs"][name]) for s in samples if name in s["logs"]]
        logs.plot([x for x, _ in points], [c.get("lines", 0) / every for _, c in points], color=colour, label=name)
        warned = [
            (x, (c.get("warning", 0) + c.get("error", 0)) / every)
            for x, c in points
            if c.get("warning") or c.get("error")
        ]
        if warned:
            logs.scatter(*zip(*warned, strict=True), color=colour, marker="x")
    logs.set_yscale("symlog")
    logs.set_title("Log lines per minute (x: warnings and errors)")
    plan = result["plan"]
    for axis in axes.flat:
        axis.axvspan(0, plan["warm_up_s"] / 60, color="0.92")
        for start, end in (plan["first_window_s"], plan["last_window_s"]):
            axis.axvspan(start / 60, end / 60, color="0.85", alpha=0.4)
        for fault in result["faults"]:
            axis.axvline(fault["at"] / 60, color="red", linewidth=0.8, alpha=0.6)
        axis.set_xlabel("minute of the run (grey: warm-up, the windows compared; red: faults)")
        axis.legend(fontsize=6, ncol=2)
    if at:
        for axis in axes.flat:
            axis.set_xlim(0, max(at))
    figure.suptitle("Soak run: a day of OpenKAT in " + minutes(plan["seconds"]) + " minutes")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
