"""`python -m bench.report`: rewrite the documents from docs/benchmarks.json."""

from __future__ import annotations

import json

from bench.report.documents import DOCS, ROOT, write


def main() -> None:
    results = json.loads((DOCS / "benchmarks.json").read_text())
    for path in write(results):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
