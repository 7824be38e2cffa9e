"""Turn scripts/fuzz.sh's counts (JSON lines) and pytest's JUnit XML into docs/fuzzing.md.

The page lists the passing runs, newest first (each run's row is carried over from the page it
replaces, `--previous`; the last RUNS_KEPT are kept), then the counts of the newest run per operation.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

RUNS_KEPT = 10
RUNS_START, RUNS_END = "<!-- runs -->", "<!-- /runs -->"


def earlier_runs(previous: str | None) -> list[str]:
    """The run rows of the page this one replaces (none when it has no runs table)."""
    if previous is None or not Path(previous).is_file():
        return []
    text = Path(previous).read_text()
    if RUNS_START not in text or RUNS_END not in text:
        return []
    table = text.split(RUNS_START, 1)[1].split(RUNS_END, 1)[0]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| date ")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--junit", required=True)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--examples", type=int, required=True)
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--exit-status", type=int, required=True)
    parser.add_argument("--commit", default="unknown", help="what the run tested: a commit, perhaps with changes")
    parser.add_argument("--previous", help="the page this run's page replaces: its runs are carried over")
    args = parser.parse_args()

    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    with open(args.report) as handle:
        for line in handle:
            entry = json.loads(line)
            counts[(entry["operation"], entry["backend"])].update(entry["statuses"])
    suite = ElementTree.parse(args.junit).getroot()
    cases = list(suite.iter("testcase"))
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in cases
        if case.find("failure") is not None or case.find("error") is not None
    ]
    statuses = sorted({status for counter in counts.values() for status in counter}, key=int)
    requests = sum(sum(counter.values()) for counter in counts.values())
    server_errors = sum(n for counter in counts.values() for status, n in counter.items() if int(status) >= 500)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    outcome = f"{len(cases) - len(failed)} of {len(cases)} tests passed"
    row = (
        f"| {date} | {args.commit} | {args.seed} | {args.examples} | {requests:,} | {server_errors} "
        f"| {args.seconds} | {outcome} |"
    )
    runs = [row, *earlier_runs(args.previous)][:RUNS_KEPT]

    print("# Fuzzing: the deep runs\n")
    print("Written by `bash scripts/fuzz.sh` (do not edit by hand). The test suite runs the same tests")
    print("derandomized with 15 examples per operation; these runs used random data, many more examples,")
    print("and both backends. Reproduce a run with `BATON_FUZZ_SEED=<seed> BATON_FUZZ_EXAMPLES=<n>`.")
    print("Only passing runs are listed: a failing run leaves this page as it was and prints its report.\n")
    print(f"## The passing runs, newest first (the last {RUNS_KEPT})\n")
    print(RUNS_START)
    print("| date | commit | seed | examples per operation | requests | status >= 500 | seconds | result |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(runs))
    print(RUNS_END + "\n")
    print("## The newest run, per operation\n")
    print(f"- date: {date}; commit: {args.commit}")
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
