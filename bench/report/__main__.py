"""`python -m bench.report`: rewrite the documents from docs/benchmarks.json."""

from __future__ import annotations

import json

from bench.report.documents import DOCS, ROOT, publish


def main() -> None:
    results = json.loads((DOCS / "benchmarks.json").read_text())
    for path in publish(results):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
