"""Services over storage that the HTTP API, the status page and the command line share; the API and
the page reach the database only through them. `app_services` (what one app serves with), `queues`
(push, pop, status changes, long-poll), `tasks` (listing, statistics, one task), `status` (the page's
read models), `operator` (requeue, change priority), tokens, metrics. Depends on baton.core: what a
service needs from the database is a port it declares (a Protocol), which `baton/storage/ports/`
implements and `baton/runtime.py` hands in. Only `tokens` (the command line's `baton token`) takes a
storage session itself."""
