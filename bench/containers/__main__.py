"""`python -m bench.containers`: run the scenarios, write the results."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import bench.containers
from bench.containers.report import SUMMARY_BEGIN, write_results, write_summary
from bench.containers.scenarios import run_embedded, run_split, run_sqlite
from bench.containers.stack import COMPOSE_FILES, PROJECT, ROOT, log


def main() -> None:
    summary = (bench.containers.__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.containers", description=summary)
    parser.add_argument("--quick", action="store_true", help="fewer events, shorter gaps (a smoke run)")
    parser.add_argument("--skip-embedded", action="store_true", help="only the split deployment")
    parser.add_argument("--keep", action="store_true", help="leave the containers running afterwards")
    parser.add_argument("--output", default=str(ROOT / "docs" / "replication-containers.md"))
    parser.add_argument(
        "--summary",
        default=str(ROOT / "docs" / "replication.md"),
        help="a document whose marked block gets the exactly-once counts ('' for none)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and check the files; run nothing")
    args = parser.parse_args()
    quick = args.quick
    split_size = {"organisations": 2 if quick else 3, "rate": 10.0 if quick else 15.0, "clients": 4 if quick else 6}
    split_gap = 6.0 if quick else 15.0
    embedded_gap = 6.0 if quick else 12.0
    if args.dry_run:
        sys.exit(dry_run(args, split_size, split_gap, embedded_gap))
    # SIGTERM (e.g. a killed job) unwinds like an exception, so every stack is taken down.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # refused connections while RabbitMQ starts
    log_dir = Path(tempfile.mkdtemp(prefix="baton-containers-"))
    log(f"logs and compose overrides in {log_dir}")
    split = run_split(log_dir, **split_size, gap=split_gap, keep=args.keep and args.skip_embedded)
    print(json.dumps(split, indent=1, default=str), flush=True)
    embedded = None
    if not args.skip_embedded:
        embedded = run_embedded(
            log_dir,
            organisations=2,
            rate=10.0,
            clients=4,
            gap=embedded_gap,
            keep=args.keep,
        )
        print(json.dumps(embedded, indent=1, default=str), flush=True)
    sqlite = None
    if not args.skip_embedded:
        sqlite = run_sqlite(log_dir, organisations=2, events_per_org=25, keep=args.keep)
        print(json.dumps(sqlite, indent=1, default=str), flush=True)
    command = "bash bench/containers.sh" + (" --quick" if quick else "")
    failed = [r for r in (split, embedded) if r and (r["duplicated"] or r["missing"] or not r["all_completed"])]
    if failed:
        # A failed run does not replace the published results: its report goes beside the logs.
        write_results(log_dir / Path(args.output).name, split, embedded, sqlite, command)
        log(f"FAILED (duplicated or missing tasks): {args.output} left as it was; report and logs in {log_dir}")
        sys.exit(1)
    write_results(Path(args.output), split, embedded, sqlite, command)
    log(f"wrote {args.output}; logs in {log_dir}")
    if args.summary:
        written = write_summary(Path(args.summary), split, embedded, command)
        log(f"{'wrote the counts into' if written else 'no summary markers in'} {args.summary}")


def dry_run(args: argparse.Namespace, split: dict[str, Any], split_gap: float, embedded_gap: float) -> int:
    """What a run would do, and whether the files it needs are there; nothing is started."""
    problems = [f"{path} is missing" for path in COMPOSE_FILES if not path.exists()]
    print("plan (--dry-run: no container is started, nothing is written):")
    print(f"  compose files: {', '.join(str(path.relative_to(ROOT)) for path in COMPOSE_FILES)}, project {PROJECT}")
    print(
        f"  split: 3 API replicas + 2 directors, {split['organisations']} organisations, "
        f"{split['rate']:g} events/s, {split['clients']} clients; a kill or restart every {split_gap:g} s: "
        "API replica, leading director, a scheduler process, PostgreSQL, RabbitMQ"
    )
    if not args.skip_embedded:
        print(f"  embedded: 2 x `baton serve` on one PostgreSQL, the leader killed after {embedded_gap:g} s")
        print("  sqlite: 2 x `baton serve` on their own SQLite files")
    print(f"  then: write {args.output}" + (f" and the counts into {args.summary}" if args.summary else ""))
    summary = Path(args.summary) if args.summary else None
    if summary is not None and SUMMARY_BEGIN not in (summary.read_text() if summary.exists() else ""):
        problems.append(f"{summary} has no '{SUMMARY_BEGIN}' block for the counts")
    for problem in problems:
        print(f"  problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    main()
