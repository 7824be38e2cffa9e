"""RabbitMQ ingest: `raw_file_received` events published to `{org}__raw_file_received`, turned into
queued normalizer tasks by ONE normalizer scheduler wired as production wires it (RabbitMQ source
beside the HTTP inbox, default prefetch and batch), against a raw INSERT of one row per event by
one psycopg client."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

import pika
import psycopg

from baton.core.logging import configure_logging
from baton.core.model import SchedulerSpec, SchedulerType
from baton.core.settings import Settings
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.ingest.rabbitmq import Publisher, event_queue
from baton.runtime import scheduler_context
from baton.storage.engine import Store
from bench.scenarios.common import ORG, Context, bench_queue, clients, connect, ratio
from bench.scenarios.push import raw_insert

MIME_TYPE = "boefje/dns-records"
TIMEOUT = 600.0


def publish(ctx: Context, events: int) -> None:
    queue_name = event_queue(ORG, SchedulerType.NORMALIZER)
    publisher = Publisher(ctx.amqp_url)
    publisher.publish(queue_name, {"type": "raw_file_received", "raw_file": {"id": "declare", "mime_types": []}})
    connection = pika.BlockingConnection(pika.URLParameters(ctx.amqp_url))
    connection.channel().queue_purge(queue_name)
    connection.close()
    run_id = uuid.uuid4().hex[:8]
    for n in range(events):
        raw_file = {"id": f"{run_id}-{n}", "mime_types": [MIME_TYPE]}
        publisher.publish(queue_name, {"type": "raw_file_received", "raw_file": raw_file})
    publisher.close()


QUEUE = f"{SchedulerType.NORMALIZER.value}-{ORG}"


def queued_tasks(conn: psycopg.Connection[Any]) -> int:
    """From the trigger-kept counters: cheap, so watching costs the scheduler (same process) little."""
    row = conn.execute("SELECT coalesce(sum(queued), 0) FROM queue_counters WHERE scheduler_id = %s", (QUEUE,))
    found = row.fetchone()
    return int(found[0]) if found else 0


def steady_rate(ctx: Context) -> float | None:
    """Tasks per second between the first and the last task created (start-up left out)."""
    with connect(ctx) as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(created_at) - min(created_at)) FROM tasks WHERE scheduler_id = %s",
            (QUEUE,),
        ).fetchone()
    if not row or not row[1]:
        return None
    return (int(row[0]) - 1) / float(row[1])


def ingest_once(ctx: Context, events: int) -> dict[str, Any]:
    """Publish `events`, then time one scheduler from its start until all of them are queued tasks."""
    bench_queue(ctx, 0)
    publish(ctx, events)
    settings = Settings(database_url=ctx.database_url, amqp_url=ctx.amqp_url, amqp_enabled=True, log_level="warning")
    store = Store(ctx.database_url)
    spec = SchedulerSpec(ORG, SchedulerType.NORMALIZER)
    scheduler = NormalizerScheduler(spec, scheduler_context(store, settings, "bench"))
    thread = threading.Thread(target=scheduler.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    done = 0
    with connect(ctx) as conn:
        while time.perf_counter() - started < TIMEOUT:
            done = queued_tasks(conn)
            if done >= events:
                break
            time.sleep(0.05)
    elapsed = time.perf_counter() - started
    scheduler.stop()
    thread.join(30)
    store.dispose()
    return {
        "events": events,
        "tasks": done,
        "seconds": elapsed,
        "per_second": done / elapsed,
        "first_to_last_task_per_second": steady_rate(ctx),
    }


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    events = ctx.size(5_000, 1_000)
    runs = [ingest_once(ctx, events) for _ in range(ctx.rounds)]
    bench_queue(ctx, 0)
    inserts = [clients(raw_insert(ctx), 1, ctx.duration)() for _ in range(ctx.rounds)]
    ingest_rate = statistics.median(run["per_second"] for run in runs)
    insert_rate = statistics.median(rate.per_second for rate in inserts)
    return {
        "events_per_run": events,
        "runs": runs,
        "complete": all(run["tasks"] >= run["events"] for run in runs),
        "events_per_second": ingest_rate,
        "raw_insert_1_client_per_second": insert_rate,
        "raw_insert_runs": [round(rate.per_second, 1) for rate in inserts],
        "ratios": {"ingest_to_raw_insert": ratio(ingest_rate, insert_rate)},
    }
