"""The failover harness: Baton through a pg_auto_failover formation's restarts and failovers."""
