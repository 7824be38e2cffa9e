"""Tasks and their queues.

- `door`: the API's way to its queues (every pop, push, status change and read of one task), over
  `links` (psycopg's async pool on PostgreSQL, SQLAlchemy otherwise);
- `pops` (the SQL of every pop), `popbatch` (concurrent pops sharing a statement);
- `push` (one task, by the admission rule), `push_statements` (its SQL), `batch_push` (many tasks of one
  queue, for the schedulers);
- `statements` (status changes, one task, counts), `operations` (what they mean on a session: pop,
  status changes, counts);
- `receipts` (settling pops whose answer was lost; idempotency keys), `wakeups` (word of queued tasks
  for waiting pops), `twins` and `twin_checks` (deduplication's writes);
- `task_rows` (one task; recovery of tasks nobody reports on), `task_actions` (an operator's actions),
  `task_pages` (every list of tasks), `listings` (pages of organisations and queues), `status_reads`
  (the status page's reads), `retention` (removing what retention no longer keeps).
"""
