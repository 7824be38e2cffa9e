"""What the planners plan from.

- `inbox` (events per scheduler) and `inputs` (which inputs wait, for wake-ups);
- `schedules` (OpenKAT's schedules, report schedules among them) and `boefje_schedules` (the SQL of
  periodic rescans); `boefje_runs` (when a boefje last ran on an object: the grace period's memory),
  `backfills` (newly enabled boefjes' objects still to plan), `raw_files` (raw files planned for);
- `plugins` (the catalogue) and `catalogue_sync` (KATalogus' listing written into it);
  `service_states` (whether KATalogus, Octopoes and Bytes answer).
"""
