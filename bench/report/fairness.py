"""Sections on fair queuing: one noisy organisation, many organisations."""

from __future__ import annotations

from typing import Any

from bench.report.formatting import measured_on, num, pct, shown, table


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
