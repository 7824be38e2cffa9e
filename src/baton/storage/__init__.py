"""Storage: the one package that speaks SQL and knows the database driver. Depends on baton.core only.

The database itself, at this level: `engine` (engines, sessions, migrations), `tables` (every table),
`urls` (BATON_DATABASE_URL), `errors` (the driver's errors as Baton's), `clock` (the database's clock),
`schema_probe` (what a database holds beyond this release), `filters` (the filter language in SQL),
`migrations/`. What it stores, a package each (each lists what it offers):

- `queues/`: tasks and their queues: pops, pushes, status changes, receipts, lists of tasks.
- `scheduling/`: what the planners plan from: inboxes, schedules, the catalogue, boefje runs.
- `control/`: who runs what: organisations, scheduler rows and leases, leadership, workers, tokens.

The packages import downwards only (queues > scheduling > control > the database), as
`lint-imports` checks.
"""
