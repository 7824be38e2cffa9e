"""Turn scripts/fuzz.sh's counts (JSON lines) and pytest's JUnit XML into docs/fuzzing.md."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from datetime import UTC, datetime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--junit", required=True)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--examples", type=int, required=True)
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--exit-status", type=int, required=True)
    args = parser.parse_args()

    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    with open(args.report) as handle:
        for line in handle:
            entry = json.loads(line)
            counts[(entry["operation"], entry["backend"])].update(entry["statuses"])
    suite = ElementTree.parse(args.junit).getroot()
    cases = suite.iter("testcase")
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in cases
        if case.find("failure") is not None or case.find("error") is not None
    ]
    statuses = sorted({status for counter in counts.values() for status in counter}, key=int)
    requests = sum(sum(counter.values()) for counter in counts.values())
    server_errors = sum(n for counter in counts.values() for status, n in counter.items() if int(status) >= 500)

    print("# Fuzzing: the last deep run\n")
    print("Written by `bash scripts/fuzz.sh` (do not edit by hand). The test suite runs the same tests")
    print("derandomized with 15 examples per operation; this run used random data, many more examples,")
    print("and both backends. Reproduce a run with `BATON_FUZZ_SEED=<seed> BATON_FUZZ_EXAMPLES=<n>`.\n")
    print(f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}")
    print(f"- seed: {args.seed}; examples per operation (hypothesis max_examples): {args.examples}")
    print(f"- requests sent: {requests:,}; answers with status >= 500: {server_errors}")
    print(f"- duration: {args.seconds} s; pytest exit status: {args.exit_status}")
    print(f"- failed tests: {', '.join(failed) if failed else 'none'}\n")
    print("| operation | backend | requests | " + " | ".join(statuses) + " |")
    print("|---|---|---:|" + "---:|" * len(statuses))
    for (operation, backend), counter in sorted(counts.items()):
        cells = " | ".join(str(counter.get(status, 0)) for status in statuses)
        print(f"| `{operation}` | {backend} | {sum(counter.values())} | {cells} |")


if __name__ == "__main__":
    main()
