"""`baton import-mula`'s SQL: reading mula's database in one read-only snapshot (`source.py`), what its
catalogue says (`catalogue.py`, also asked by `baton migrate`), and writing Baton's rows (`target.py`).
The rules that decide what a row becomes are `baton.core.mula`'s."""
