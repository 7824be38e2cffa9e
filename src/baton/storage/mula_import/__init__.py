"""`baton import-mula`'s SQL: reading mula's database in one read-only snapshot (`source.py`) and
writing Baton's rows (`target.py`). What a schema holds (mula's tables, Baton's, someone else's) is read by
`storage/foreign_tables.py`, which `baton migrate` asks too; the rules that decide what a row becomes are
`baton.core.mula`'s."""
