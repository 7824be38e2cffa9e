"""The `baton` command line."""

from __future__ import annotations

from typing import Annotated, Any

import typer
import uvicorn

from baton import __version__
from baton.config import Settings
from baton.logs import configure_logging
from baton.store import Store

app = typer.Typer(
    help="Baton: priority queues of scanning work per organisation, served over HTTP.",
    no_args_is_help=True,
    add_completion=False,
)

DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", help="SQLAlchemy URL; overrides BATON_DATABASE_URL (default sqlite:///baton.db)."),
]


def load_settings(**overrides: Any) -> Settings:
    """Environment first, then whichever command-line flags were given."""
    settings = Settings()
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return settings
    return Settings.model_validate({**settings.model_dump(), **given})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"baton {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Baton command line."""


@app.command()
def migrate(database_url: DatabaseUrl = None) -> None:
    """Create or upgrade the database schema to the newest version (safe to run repeatedly)."""
    settings = load_settings(database_url=database_url)
    configure_logging(settings.log_level, settings.log_json)
    store = Store(settings.database_url)
    store.migrate()
    typer.echo(f"database at {store.engine.url.render_as_string(hide_password=True)} is up to date")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Listen address; overrides BATON_HOST (127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port; overrides BATON_PORT (8000).")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Run the HTTP API (applies migrations first). The embedded default: SQLite, nothing to install."""
    from baton.api import create_app

    settings = load_settings(host=host, port=port, database_url=database_url)
    configure_logging(settings.log_level, settings.log_json)
    store = Store(settings.database_url)
    store.migrate()
    api = create_app(settings, store)
    uvicorn.run(api, host=settings.host, port=settings.port, log_level=settings.log_level.lower())


def main() -> None:
    app()
