"""Services over storage that the HTTP API, the status page and the command line share: the queue
service (push, pop, status changes), tokens, metrics. Depends on baton.storage and baton.core."""
