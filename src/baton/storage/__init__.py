"""Storage: the one package that speaks SQL and knows the database driver. Depends on baton.core only.

The database itself, at this level: `engine` (engines, sessions, migrations), `tables` (every table),
`urls` (BATON_DATABASE_URL), `errors` (the driver's errors as Baton's), `clock` (the database's clock),
`schema_probe` (what a database holds beyond this release), `filters` (the filter language in SQL),
`foreign_tables` (what a schema holds of mula's tables: `baton migrate` refuses them), `migrations/`.
What it stores, a package each (each lists what it offers):

- `queues/`: tasks and their queues: pops, pushes, status changes, receipts, lists of tasks.
- `scheduling/`: what the planners plan from: inboxes, schedules, the catalogue, boefje runs.
- `control/`: who runs what: organisations, scheduler rows and leases, leadership, workers, tokens.
- `mula_import/`: `baton import-mula`: mula's database read, its tasks, schedules and organisations
  written into Baton's.

The packages import downwards only (`ports/`, the services' ports, and mula_import > queues > scheduling >
control > the database), as `lint-imports` checks.
"""
