"""A pg_auto_failover formation on loopback with Baton under load: the failover benchmark's and test's harness."""
