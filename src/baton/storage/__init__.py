"""Storage: tables, migrations, the named statements and the executors that run them.

Depends on baton.core only. Nothing above this package builds SQL of its own.
"""
