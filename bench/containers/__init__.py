"""The replication experiment in real containers (Podman + podman-compose; `bash bench/containers.sh`).

Scenario "split": deploy/docker-compose.yml as it is (with the local-images override): 3 API replicas
(`baton serve --no-director`), 2 directors (`baton director --runner process`, schedulers are child
processes inside the leading director's container), 1 PostgreSQL, 1 RabbitMQ. Job-runner clients run
on the host and pop through the replicas' published ports on 127.0.0.1 (pop, then PATCH completed);
organisations and scan-profile mutations are published to RabbitMQ. While events flow, in turn:
`podman kill` an API replica (started again after a few seconds, as an orchestrator would), the
leading director's container (found through the `leaders` table), one scheduler process inside the
leader's container (`kill -9`), then `podman restart` PostgreSQL and RabbitMQ once each.

Scenario "embedded": what the question asks literally, a container whose process holds its
schedulers in memory (`baton serve`: API + director + thread-runner schedulers in one process)
replicated twice on one PostgreSQL; the leading replica is killed mid-run. Scenario "sqlite": the
same container on the image's default (a SQLite file per container), replicated twice.

Counted from what the clients saw and what the database holds: events in (confirmed publishes),
tasks created, duplicated (one hash or one event twice), missing (an event without a task), handed
out twice (every pop of every client is recorded), completed; failover and recovery times; what each
kill or restart cost (client errors, the longest time without a successful pop, event-to-task delay).

Modules: stack (podman, podman-compose, waiting), clients (job runners and publisher, the Ledger of
what they saw), chaos (kills and restarts), measure (counts and costs), scenarios (the three runs),
report (the documents), __main__ (the command line).

    python -m bench.containers [--quick] [--skip-embedded] [--keep] [--output FILE] [--summary FILE]
"""
