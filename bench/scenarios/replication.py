"""Replication: the chaos scenario (`harness.chaos.run_chaos`: API replicas and two directors as
real processes, job runners working while an API replica, the leading director and a scheduler are
SIGKILLed) and completed tasks per second with 1, 2 and 4 API replicas (`run_throughput`)."""

from __future__ import annotations

from typing import Any

from baton.core.logging import configure_logging
from bench.scenarios.common import Context, ratio
from harness.chaos import run_chaos, run_throughput

REPLICAS = (1, 2, 4)
CLIENTS = 8
BATCH = 1


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    chaos = run_chaos(
        ctx.database_url,
        api_replicas=2 if ctx.quick else 3,
        clients=4 if ctx.quick else 8,
        events=200 if ctx.quick else 1500,
        organisations=2 if ctx.quick else 4,
    )
    tasks = ctx.size(4000, 600)
    rates = {replicas: run_throughput(ctx.database_url, replicas, CLIENTS, tasks, BATCH) for replicas in REPLICAS}
    return {
        "chaos": chaos,
        "throughput": {
            "clients": CLIENTS,
            "batch": BATCH,
            "tasks": tasks,
            "completed_per_second": {str(replicas): rate for replicas, rate in rates.items()},
            "ratio_to_one_replica": {str(replicas): ratio(rate, rates[1]) for replicas, rate in rates.items()},
        },
    }
