"""Planners: what each type of scheduler makes of its events and due schedules. One scheduler module per
type (boefje, normalizer, report); the boefje scheduler's planners each in a module of its own, sharing
one maker of boefje tasks (boefje_tasks.py): rescan_rounds.py (due boefje schedules), new_boefjes.py,
twins.py and catalogue_sync.py; scheduled.py fires due report schedules. Each is given a `Planning`
(ingest/planning.py), never its scheduler. The home of new planning rules."""
