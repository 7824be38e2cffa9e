"""Control: where schedulers run (threads, processes, pods), who leads (leases), the director that
reconciles them, and organisations arriving over RabbitMQ. Depends on ingest, storage, core."""
