"""The command line: `baton serve|director|standalone|worker|migrate|publish|token|probe`.

An error ends a command with one line on stderr and exit code 1; `--debug` (anywhere on the line)
or BATON_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import click
import typer
import typer.main

from baton.cli.app import app
from baton.cli.errors import explain
from baton.core.logging import configure_logging

TRUTHY = frozenset({"1", "true", "yes", "on"})
# Usage errors (a missing option, a bad value): click's, and those of the copy of click that recent
# typer releases carry; both print click's usage message and exit 2.
USAGE_ERRORS: tuple[type[Exception], ...] = (click.ClickException,)
ABORTS: tuple[type[BaseException], ...] = (click.exceptions.Abort, typer.Abort)
try:
    from typer._click.exceptions import ClickException as _VendoredClickException

    USAGE_ERRORS += (_VendoredClickException,)
except ImportError:  # a typer that uses click itself
    pass


@functools.cache
def command() -> Any:
    """The click command typer makes of `app`, made once (the fork server makes it before forking).
    `Any`: a click command, of click itself or of the copy recent typer releases carry."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("BATON_DEBUG", "").strip().lower() in TRUTHY or "--debug" in args
    args = [arg for arg in args if arg != "--debug"]
    configure_logging(os.environ.get("BATON_LOG_LEVEL", "info"), os.environ.get("BATON_LOG_JSON", "").lower() in TRUTHY)
    try:
        outcome = command().main(args=args, prog_name="baton", standalone_mode=False)
    except USAGE_ERRORS as exc:
        exc.show()  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except ABORTS:
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        print(f"baton: error: {explain(exc)}", file=sys.stderr)
        sys.exit(1)
    sys.exit(outcome if isinstance(outcome, int) else 0)


__all__ = ["app", "command", "main"]
