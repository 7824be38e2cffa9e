"""`python -m bench.containers`: run the scenarios, write the results."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path

import bench.containers
from bench.containers.report import write_results, write_summary
from bench.containers.scenarios import run_embedded, run_split, run_sqlite
from bench.containers.stack import ROOT, log


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
    args = parser.parse_args()
    # SIGTERM (e.g. a killed job) unwinds like an exception, so every stack is taken down.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # refused connections while RabbitMQ starts
    log_dir = Path(tempfile.mkdtemp(prefix="baton-containers-"))
    log(f"logs and compose overrides in {log_dir}")
    quick = args.quick
    split = run_split(
        log_dir,
        organisations=2 if quick else 3,
        rate=10.0 if quick else 15.0,
        clients=4 if quick else 6,
        gap=6.0 if quick else 15.0,
        keep=args.keep and args.skip_embedded,
    )
    print(json.dumps(split, indent=1, default=str), flush=True)
    embedded = None
    if not args.skip_embedded:
        embedded = run_embedded(
            log_dir,
            organisations=2,
            rate=10.0,
            clients=4,
            gap=6.0 if quick else 12.0,
            keep=args.keep,
        )
        print(json.dumps(embedded, indent=1, default=str), flush=True)
    sqlite = None
    if not args.skip_embedded:
        sqlite = run_sqlite(log_dir, organisations=2, events_per_org=25, keep=args.keep)
        print(json.dumps(sqlite, indent=1, default=str), flush=True)
    command = "bash bench/containers.sh" + (" --quick" if quick else "")
    write_results(Path(args.output), split, embedded, sqlite, command)
    log(f"wrote {args.output}; logs in {log_dir}")
    if args.summary:
        written = write_summary(Path(args.summary), split, embedded, command)
        log(f"{'wrote the counts into' if written else 'no summary markers in'} {args.summary}")
    failed = [r for r in (split, embedded) if r and (r["duplicated"] or r["missing"] or not r["all_completed"])]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
