"""Fair pop across organisations (issue 21): ten organisations, one ("noisy") with a large backlog,
nine ("quiet-1".."quiet-9") receiving a steady trickle of new tasks at the same priority through
HTTP pushes, while 8 job-runner clients pop through `POST /schedulers/boefje/pop` on one
`baton serve`. Three runs: BATON_FAIRNESS=false, =true, and =true without the noisy organisation
(the baseline for dwell). Dwell = push to hand-out, from the tasks' `created_at` and `modified_at`
(both set by the server); a quiet task not handed out by the end of a run counts with its age then
(so its dwell is a lower bound). Separately, pop throughput with fairness off and on, interleaved,
with all ten organisations backlogged."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from bench.loadgen import measure
from bench.scenarios.common import (
    Context,
    add_organisations,
    clients,
    connect,
    fill,
    fresh_database,
    http_pop_many,
    interleaved,
    now,
    percentile,
    ratio,
    serve,
)

NOISY = "noisy"
QUIET = [f"quiet-{n}" for n in range(1, 10)]
PRIORITY = 2
RUNNERS = 8
PUSHES_PER_SECOND_PER_ORGANISATION = 4.0


class Feeder(threading.Thread):
    """Pushes to each quiet organisation's boefje queue at a fixed rate, on a fixed schedule."""

    def __init__(self, url: str, duration: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.duration = duration
        self.started = threading.Event()
        self.start_at = 0.0
        self.deadline = 0.0
        self.pushed = 0
        self.failed = 0
        self.late_s = 0.0

    def begin(self, start_at: float) -> None:
        """Called when the runners start: push on the same clock."""
        self.start_at = start_at
        self.deadline = start_at + self.duration
        self.started.set()

    def run(self) -> None:
        if not self.started.wait(600):
            return
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        interval = 1 / (PUSHES_PER_SECOND_PER_ORGANISATION * len(QUIET))
        n = 0
        while True:
            due = self.start_at + n * interval
            if due >= self.deadline:
                break
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            else:
                self.late_s = max(self.late_s, -wait)
            organisation = QUIET[n % len(QUIET)]
            body = json.dumps({"priority": PRIORITY, "data": {"boefje": {"id": "dns-records"}, "n": n}})
            conn.request(
                "POST", f"/queues/boefje-{organisation}/push", body=body, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            response.read()
            if response.status == 201:
                self.pushed += 1
            else:
                self.failed += 1
            n += 1
        conn.close()


def dwell_run(ctx: Context, fairness: bool, noisy: bool, backlog: int, duration: float) -> dict[str, Any]:
    fresh_database(ctx)
    with connect(ctx) as conn:
        add_organisations(conn, [NOISY, *QUIET] if noisy else QUIET)
        if noisy:
            fill(conn, [NOISY], backlog, priority=str(PRIORITY))
    env = {"BATON_FAIRNESS": "true" if fairness else "false"}
    with serve(ctx.database_url, env, log_dir=ctx.work_dir) as server:
        feeder = Feeder(server.url, duration)
        feeder.start()
        runner = http_pop_many(server.url, "boefje", 1, stop_when_dry=False)
        pops = measure([runner] * RUNNERS, duration, on_start=feeder.begin)
        feeder.join(60)
        ended = now()
    with connect(ctx) as conn:
        quiet_rows = conn.execute(
            "SELECT organisation, status, created_at, modified_at FROM tasks WHERE organisation = ANY(%s)",
            (QUIET,),
        ).fetchall()
        handed_out = dict(
            conn.execute(
                "SELECT organisation, count(*) FROM tasks WHERE status = 'dispatched' GROUP BY organisation"
            ).fetchall()
        )
        left = conn.execute("SELECT count(*) FROM tasks WHERE organisation = %s AND status = 'queued'", (NOISY,))
        noisy_left = int(left.fetchone()[0])  # type: ignore[index]
    run_start = feeder.start_at
    dwell: list[float] = []
    served: list[float] = []
    points = []
    per_org: dict[str, list[float]] = defaultdict(list)
    for organisation, status, created_at, modified_at in quiet_rows:
        was_served = status == "dispatched"
        seconds = ((modified_at if was_served else ended) - created_at).total_seconds()
        dwell.append(seconds)
        per_org[organisation].append(seconds)
        if was_served:
            served.append(seconds)
        points.append([organisation, round(created_at.timestamp() - run_start, 3), round(seconds, 4), was_served])
    total = sum(handed_out.values())
    return {
        "fairness": fairness,
        "noisy": noisy,
        "backlog": backlog if noisy else 0,
        "noisy_left_queued": noisy_left if noisy else None,
        "duration_s": duration,
        "pops_per_second": pops.per_second,
        "pop_p50_ms": pops.p50_ms,
        "pop_p99_ms": pops.p99_ms,
        "quiet_pushed": feeder.pushed,
        "quiet_push_failures": feeder.failed,
        "feeder_max_late_s": feeder.late_s,
        "quiet_tasks": len(dwell),
        "quiet_served": len(served),
        "quiet_dwell_p50_s": percentile(dwell, 0.50),
        "quiet_dwell_p99_s": percentile(dwell, 0.99),
        "quiet_served_dwell_p50_s": percentile(served, 0.50) if served else None,
        "quiet_served_dwell_p99_s": percentile(served, 0.99) if served else None,
        "worst_quiet_org_p99_s": max((percentile(values, 0.99) for values in per_org.values()), default=None),
        "share_of_pops": {org: count / total for org, count in sorted(handed_out.items())} if total else {},
        "points": points,
    }


def throughput(ctx: Context) -> dict[str, Any]:
    """Pop throughput, fairness off vs on, all ten organisations backlogged, interleaved rounds."""
    per_organisation = ctx.size(20_000, 5_000)
    fresh_database(ctx)
    with connect(ctx) as conn:
        add_organisations(conn, [NOISY, *QUIET])
        fill(conn, [NOISY, *QUIET], per_organisation, priority=str(PRIORITY))
    with (
        serve(ctx.database_url, {"BATON_FAIRNESS": "false"}, log_dir=ctx.work_dir) as strict,
        serve(ctx.database_url, {"BATON_FAIRNESS": "true"}, log_dir=ctx.work_dir) as fair,
    ):
        measured = interleaved(
            {
                "fairness off": clients(http_pop_many(strict.url, "boefje"), RUNNERS, ctx.duration),
                "fairness on": clients(http_pop_many(fair.url, "boefje"), RUNNERS, ctx.duration),
            },
            ctx.rounds,
        )
        with connect(ctx) as conn:
            shares = Counter(
                dict(
                    conn.execute(
                        "SELECT organisation, count(*) FROM tasks WHERE status = 'dispatched' GROUP BY organisation"
                    ).fetchall()
                )
            )
    return {
        "backlog_per_organisation": per_organisation,
        "series": measured,
        "handed_out_per_organisation": dict(sorted(shares.items())),
    }


def run(ctx: Context) -> dict[str, Any]:
    backlog = ctx.size(100_000, 30_000)
    duration = ctx.size(30, 10)
    runs = {
        "off": dwell_run(ctx, fairness=False, noisy=True, backlog=backlog, duration=duration),
        "on": dwell_run(ctx, fairness=True, noisy=True, backlog=backlog, duration=duration),
        "no_noisy": dwell_run(ctx, fairness=True, noisy=False, backlog=backlog, duration=duration),
    }
    rates = throughput(ctx)
    return {
        "runners": RUNNERS,
        "quiet_organisations": len(QUIET),
        "pushes_per_second_per_quiet_organisation": PUSHES_PER_SECOND_PER_ORGANISATION,
        "priority": PRIORITY,
        "runs": runs,
        "throughput": rates,
        "ratios": {
            "dwell_p99_on_to_no_noisy": ratio(runs["on"]["quiet_dwell_p99_s"], runs["no_noisy"]["quiet_dwell_p99_s"]),
            "dwell_p99_off_to_no_noisy": ratio(runs["off"]["quiet_dwell_p99_s"], runs["no_noisy"]["quiet_dwell_p99_s"]),
            "throughput_on_to_off": ratio(
                rates["series"]["fairness on"]["per_second"], rates["series"]["fairness off"]["per_second"]
            ),
        },
    }
