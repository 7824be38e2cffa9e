"""Who runs what.

- `organisations` (organisations and their queues) and `organisation_sync` (as KATalogus lists them);
- `scheduler_rows` (a queue's settings and its scheduler's state), `scheduler_leases` (ownership,
  renewals, fencing), `leadership` (the director's lease), `workers` and `pool_changes` (worker mode);
- `liveness` (what `baton probe` reads), `tokens` (API tokens).
"""
