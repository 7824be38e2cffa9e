"""Sections on running schedulers: the director's processes and memory, `baton worker` shares."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import lease_settings, measured_on, num, seconds, table

RUNNERS = {
    "thread": "thread",
    "process": "process (forked)",
    "process-exec": "process (fresh interpreters)",
}


def section_director(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            RUNNERS.get(row["runner"], row["runner"]),
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
        "(thread runner) or the director plus its children (process runner: resident sets counted whole, shared "
        "pages once per process; the unique and proportional memory below count them right). Not a ratio: "
        "indicative only.",
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
        *scheduler_process_lines(result),
        *fork_probe_lines(result.get("fork_probe")),
        *import_floor_lines(result.get("import_floor")),
    ]


def fork_probe_lines(probe: dict[str, Any] | None) -> list[str]:
    """Where a forked child's unique memory comes from (bench/fork_probe.py)."""
    if not probe:
        return []
    uss = probe["uss_mib"]
    rows = [[step, num(uss.get(step), 1)] for step in ("forked", "store opened", "scheduler running")]
    allocated = uss.get("allocated after the fork")
    running = uss.get("scheduler running")
    copied = None if allocated is None or running is None else running - allocated
    return [
        "",
        f"Where a forked child's USS comes from (`bench/fork_probe.py`: children forked as the fork server "
        f"forks them, each stopped at a step of its start, measured {probe['seconds']:.0f} s after the fork):",
        "",
        *table(["child", "USS MiB"], rows, "lr"),
        f"Of a running child's USS, the objects it allocated after the fork and still holds come to "
        f"{num(allocated, 2)} MiB (tracemalloc, in a second running child); the other {num(copied, 1)} MiB are "
        "pages it shares with the server until it writes them, copied at the first write. Python 3.11 writes "
        "into every object it uses, each function it calls and its code among them (their reference counts), "
        "so each page holding something a child touches becomes its own, whatever the fork server preloads "
        "or rehearses: what a child's USS measures is how much of the server's "
        "memory its code touches. The fork server rehearses a child's first steps (command line, settings, "
        "store, ORM mappers) so that what those fill in stays shared.",
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
        f"a CLI library) take {num(libraries, 1)} MiB before a line of Baton runs: in a fresh interpreter each, "
        "every scheduler process pays them; forked from the fork server, its children share them.",
        "",
    ]


def scheduler_process_lines(result: dict[str, Any]) -> list[str]:
    """One scheduler process's memory, per process-runner case: forked from the fork server, or a
    fresh interpreter."""
    cases = [case for case in result["cases"] if case.get("scheduler_process")]
    if not cases:
        return []
    rows = []
    for case in cases:
        memory = case["scheduler_process"]
        rows.append(
            [
                RUNNERS.get(case["runner"], case["runner"]),
                f"{memory['processes']:,}",
                f"{num(memory.get('uss_median_mib'), 1)} / {num(memory.get('uss_max_mib'), 1)}",
                num(memory.get("pss_median_mib"), 1),
                num(memory.get("rss_median_mib"), 1),
                num(memory.get("anon_median_mib"), 1),
                num(memory.get("hwm_max_mib"), 1),
                num(memory.get("server_rss_mib"), 1) if memory.get("forked") else "—",
                num(memory.get("pss_per_scheduler_mib"), 1),
            ]
        )
    return [
        "",
        "One scheduler process (a process-runner child running `baton standalone`), measured once every child "
        "has had its first tick: USS (unique: the pages only this process maps, what each further child adds), "
        "PSS (its share of every page it maps, a shared page divided among the processes mapping it), VmRSS "
        "(resident, shared pages counted whole), RssAnon (resident, not backed by a file) and VmHWM (peak "
        "resident), from psutil and /proc/<pid>/status; medians unless named. Forked children come from the "
        "runner's fork server (`python -m baton.cli.forkserver`: it has imported and rehearsed what a child runs, "
        "then forks one per scheduler); fresh interpreters are what the runner starts without it, and what a "
        "pod runs. *PSS per scheduler*: the children's and the server's PSS summed, divided by the children: "
        "every page counted once, what each scheduler costs in all.",
        "",
        *table(
            [
                "children",
                "processes",
                "USS MiB median / max",
                "PSS MiB",
                "VmRSS MiB",
                "RssAnon MiB",
                "VmHWM MiB max",
                "fork server VmRSS MiB",
                "PSS per scheduler MiB",
            ],
            rows,
            "lrrrrrrrr",
        ),
        "",
    ]


def section_workers(result: dict[str, Any]) -> list[str]:
    rows = []
    for case in result["cases"]:
        shares = case["per_worker"]
        rss = case["rss_mib_per_worker"]
        audit = case["audit"]
        rows.append(
            [
                str(case["workers"]),
                seconds(case["all_running_s"]),
                seconds(case["balanced_s"]),
                f"{min(shares):,} / {max(shares):,}",
                num(case["balance_max_to_min"], 2),
                num(sum(rss) / len(rss)),
                num(case["rss_mib_per_scheduler"], 3),
                num(case["rss_mib_per_scheduler_above_idle"], 3),
                f"{seconds(case['sigkill_handover_s'])} ({case['sigkill_held']:,})" if "sigkill_held" in case else "—",
                f"{seconds(case['sigterm_handover_s'])} ({case['sigterm_held']:,})" if "sigterm_held" in case else "—",
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
        f"1, 2 and 4 `baton worker` processes started together ({lease_settings(result['settings'])}: the "
        "default lease settings; the poll interval is raised from 1 s so that 3,000 idle pollers do not become "
        "the load measured). *All running*: from starting the processes (interpreter start-up included: "
        f"{seconds(idle['startup_s'])} s for an idle worker to register) until every scheduler row is owned by a "
        "live worker and `running`; *balanced*: until, in addition, shares differ by at most one. RSS: VmRSS from "
        f"/proc once balanced; an idle worker (no schedulers) has {num(idle['rss_mib'])} MiB, subtracted in "
        "*MiB per scheduler above idle*. With 2 and 4 workers: SIGKILL of one (its peers must wait for its "
        f"leases to expire: target lease + one worker round = {targets['sigkill_handover_s']:g} s), a "
        "replacement started as a Deployment would, then SIGTERM of another (it releases its rows: target "
        f"< {targets['sigterm_handover_s']:g} s); hand-over = until every scheduler runs under the remaining "
        "workers (schedulers the stopped worker held in brackets). Events were fed to every normalizer all "
        "along, and every write to a scheduler row, task or consumed event was logged by triggers "
        "(`harness.writelog`) and judged per case.",
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
        f"process, `Director.reconcile()`) converged in **{seconds(director['converged_s'])} s** (first reconcile "
        f"round {seconds(director['reconcile_s'], 2)} s, {num(director['per_scheduler_mib'], 3)} MiB per "
        "scheduler)"
        + (
            f"; one worker process ran all of them after {seconds(one['all_running_s'])} s from its start"
            if one
            else ""
        )
        + ".",
        "",
    ]
    return lines
