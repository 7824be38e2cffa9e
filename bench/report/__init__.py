"""Turns benchmark results (what the scenarios returned, as saved in docs/benchmarks.json) into
docs/benchmarks.md, docs/benchmarks.png, docs/benchmarks-fairness.png, docs/replication-results.md and
docs/replication-leases.md.

Targets are data (`targets`): a name, where the measured value sits in the results, a threshold and a
comparison. The verdict is computed here from the measurement, never typed. Each group of sections
has its module (`throughput`, `fairness`, `schedulers`, `leases`, `profiles`, written with
`formatting`); `documents` assembles them and `plots` draws the figures.

    python -m bench.report            # rewrite the documents from docs/benchmarks.json
"""

from bench.report.documents import DOCS, ROOT, publish, write

__all__ = ["DOCS", "ROOT", "publish", "write"]
