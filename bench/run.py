"""Run benchmark scenarios, save what they return to docs/benchmarks.json, write the documents.

    bash bench/run.sh [--quick]                      # throw-away PostgreSQL and RabbitMQ, every scenario
    python -m bench.run --database-url URL --amqp-url URL [--quick] [--only NAME,...] [--skip NAME,...]
    python -m bench.run --profile                    # just the profile (before/after)
    python -m bench.run --only soak --soak-minutes 60  # the soak run, an hour (--quick: a minute)

Running a subset keeps the other scenarios' results from docs/benchmarks.json (each result carries
when it was measured and whether it was quick); running all of them starts afresh. Nothing in docs/
changes unless every chosen scenario succeeded: a failed run keeps what the others measured in a
file of its own (its path is printed), and `--results` writes the JSON, and the documents beside it,
elsewhere (`--results /tmp/bench/benchmarks.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report
from bench.scenarios import NAMES, load

RESULTS = report.DOCS / "benchmarks.json"


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu = f"{model}, " if model else ""
    system = f"Linux {platform.release()}, Python {platform.python_version()}"
    return f"{platform.machine()}, {cpu}{os.cpu_count()} cores, {system}"


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def choose(args: argparse.Namespace) -> list[str]:
    if args.profile:
        return ["profile"]
    chosen = [name.strip() for name in args.only.split(",")] if args.only else list(NAMES)
    skipped = {name.strip() for name in args.skip.split(",")} if args.skip else set()
    for name in [*chosen, *skipped]:
        load(name)  # refuses unknown names
    return [name for name in chosen if name not in skipped]


def main() -> None:
    parser = argparse.ArgumentParser(description="Baton's benchmarks")
    parser.add_argument("--database-url", default=os.environ.get("BATON_TEST_POSTGRES_URL"))
    parser.add_argument("--amqp-url", default=os.environ.get("BATON_TEST_AMQP_URL"))
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs: a smoke test")
    parser.add_argument("--only", help=f"comma-separated scenarios ({', '.join(NAMES)})")
    parser.add_argument("--skip", help="comma-separated scenarios to leave out")
    parser.add_argument("--profile", action="store_true", help="run only the profile scenario")
    parser.add_argument(
        "--old-worktree",
        type=Path,
        default=Path(os.environ.get("BATON_BENCH_OLD_WORKTREE", report.ROOT.parent / "wt-old")),
        help="checkout of the pre-restructure commit with its own .venv, for the profile's 'before'",
    )
    parser.add_argument(
        "--soak-minutes", type=float, help="the soak run's length (default 60, with --quick 1)", default=None
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not args.database_url or not args.amqp_url:
        parser.error("need --database-url and --amqp-url (or BATON_TEST_POSTGRES_URL and BATON_TEST_AMQP_URL)")
    names = choose(args)
    # Imported here, not at the top: the load generator's spawned processes import this module as
    # their __main__, and should not pay for SQLAlchemy and the rest.
    from bench.scenarios.common import Context, postgres_version

    ctx = Context(
        args.database_url,
        args.amqp_url,
        quick=args.quick,
        old_worktree=args.old_worktree,
        soak_minutes=args.soak_minutes,
    )

    results: dict[str, Any] = {"meta": {}, "scenarios": {}}
    if set(names) != set(NAMES) and args.results.exists():
        results = json.loads(args.results.read_text())
    command = "bash bench/run.sh" + (" --quick" if args.quick else "")
    if set(names) != set(NAMES):
        command = "python -m bench.run " + " ".join(sys.argv[1:]).replace(args.database_url, "URL").replace(
            args.amqp_url, "URL"
        )
    load_before = os.getloadavg()[0]
    failures = []
    for name in names:
        print(f"[{stamp()}] {name} ...", file=sys.stderr, flush=True)
        started, began = stamp(), time.monotonic()
        try:
            result = load(name).run(ctx)
        except Exception as exc:  # one broken scenario must not lose the others' results
            failures.append(name)
            print(f"[{stamp()}] {name} FAILED: {exc!r}", file=sys.stderr, flush=True)
            import traceback

            traceback.print_exc()
            continue
        result["_meta"] = {"started": started, "seconds": time.monotonic() - began, "quick": args.quick}
        results["scenarios"][name] = result
        print(f"[{stamp()}] {name} done in {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
        results["meta"] = {
            "command": command,
            "finished": stamp(),
            "machine": machine(),
            "postgresql": postgres_version(ctx),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "quick": args.quick,
        }
    if failures:
        kept = ""
        if results["scenarios"]:
            handle, name = tempfile.mkstemp(prefix="baton-bench-", suffix=".json")
            with os.fdopen(handle, "w") as out:
                out.write(json.dumps(results, indent=1, default=str) + "\n")
            kept = f"; what the others measured is in {name}"
        sys.exit(f"failed: {', '.join(failures)}; {args.results} and the documents are unchanged{kept}")
    for path in report.publish(results, args.results):
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
