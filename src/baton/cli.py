"""The `baton` command line."""

from __future__ import annotations

import enum
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any

import click
import typer
import uvicorn
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError

from baton import __version__
from baton.auth import Scope, create_token, list_tokens, revoke_token
from baton.cli_errors import amqp_error, database_error, describe_database, explain, settings_error
from baton.config import Settings
from baton.director import Director
from baton.errors import ConfigurationError
from baton.events import RawFileReceived, ScanProfileMutation
from baton.leader import default_elector
from baton.logs import configure_logging, get_logger
from baton.messaging import (
    AMQP_ERRORS,
    OrganisationCreated,
    OrganisationDeleted,
    OrganisationRef,
    OrganisationWatcher,
    Publisher,
    organisation_applier,
    source_factory,
)
from baton.models import Scheduler as SchedulerRow
from baton.models import SchedulerType
from baton.plugins import seed_catalogue
from baton.runners import ProcessRunner, Runner, ThreadRunner
from baton.schedulers import SchedulerContext, SchedulerSpec, build_scheduler
from baton.store import ConflictError, NotFoundError, Store, process_location

app = typer.Typer(
    help="Baton: priority queues of scanning work per organisation, served over HTTP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
TRUTHY = frozenset({"1", "true", "yes", "on"})

DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", help="SQLAlchemy URL; overrides BATON_DATABASE_URL (default sqlite:///baton.db)."),
]


def load_settings(**overrides: Any) -> Settings:
    """Environment first, then whichever command-line flags were given."""
    try:
        settings = Settings()
        given = {key: value for key, value in overrides.items() if value is not None}
        if not given:
            return settings
        return Settings.model_validate({**settings.model_dump(), **given})
    except ValidationError as exc:
        raise settings_error(exc) from exc


def _version(value: bool) -> None:
    if value:
        typer.echo(f"baton {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of an error (also BATON_DEBUG=1); any position.")
    ] = False,
) -> None:
    """Baton command line."""


def open_store(settings: Settings) -> Store:
    """The store, or one clear line saying why the database cannot be used."""
    try:
        store = Store(settings.database_url)
        store.ping()
    except (DBAPIError, OSError) as exc:
        raise database_error(exc, settings.database_url) from exc
    return store


def prepare_store(settings: Settings) -> Store:
    """Open the store, apply migrations and seed the plugin catalogue (idempotent)."""
    store = open_store(settings)
    try:
        store.migrate()
        with store.session() as session:
            seed_catalogue(session, settings.plugins_file)
    except (DBAPIError, OSError) as exc:
        raise database_error(exc, settings.database_url) from exc
    return store


@app.command()
def migrate(database_url: DatabaseUrl = None) -> None:
    """Create or upgrade the database schema and seed the plugin catalogue (safe to run repeatedly)."""
    settings = load_settings(database_url=database_url)
    configure_logging(settings.log_level, settings.log_json)
    store = prepare_store(settings)
    typer.echo(f"database at {store.engine.url.render_as_string(hide_password=True)} is up to date")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Listen address; overrides BATON_HOST (127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port; overrides BATON_PORT (8000).")] = None,
    database_url: DatabaseUrl = None,
    no_director: Annotated[bool, typer.Option("--no-director", help="Serve the API only.")] = False,
) -> None:
    """Run the HTTP API and, unless --no-director, a director with the thread runner in this process.

    The embedded default: SQLite in ./baton.db, nothing else to install. Applies migrations first.
    """
    from baton.api import create_app

    settings = load_settings(host=host, port=port, database_url=database_url)
    configure_logging(settings.log_level, settings.log_json)
    store = prepare_store(settings)
    if not settings.auth_required:
        get_logger("baton.cli").warning(
            "authentication is OFF: anyone who can reach the API can push and pop",
            host=settings.host,
            hint="set BATON_AUTH=on, or listen on a non-loopback address, to require tokens",
        )
    services = [] if no_director else director_services(store, settings, RunnerKind.thread)
    api = create_app(settings, store, services=services)
    # Baton logs one structured line per request itself (api/security.py), so uvicorn's is off.
    uvicorn.run(
        api,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        log_config=None,  # our handlers (logs.py): one format for every line
        access_log=False,
    )


class RunnerKind(enum.StrEnum):
    thread = "thread"
    process = "process"
    kubernetes = "kubernetes"


def build_director(store: Store, settings: Settings, runner_kind: RunnerKind) -> Director:
    runner: Runner
    if runner_kind is RunnerKind.thread:
        context = SchedulerContext(
            store=store,
            settings=settings,
            runner="thread",
            location=process_location(),
            source_factory=source_factory(settings),
        )
        runner = ThreadRunner(context)
    elif runner_kind is RunnerKind.process:
        runner = ProcessRunner(store, settings.database_url)
    else:
        return build_kubernetes_director(store, settings)
    return Director(store, settings, runner, default_elector(store))


def build_kubernetes_director(store: Store, settings: Settings) -> Director:
    """Pods via the official client; leadership via a coordination.k8s.io Lease."""
    from baton.k8s import KubernetesRunner, LeaseElector, load_api_client

    api, namespace = load_api_client(settings)
    identity = os.environ.get("POD_NAME") or process_location()
    elector = LeaseElector(api, namespace, settings.k8s_lease_name, identity)
    return Director(store, settings, KubernetesRunner(api, settings, namespace), elector, holder=identity)


def director_services(
    store: Store, settings: Settings, runner_kind: RunnerKind
) -> list[Director | OrganisationWatcher]:
    """The director and, with RabbitMQ enabled, the organisation watcher that feeds it."""
    services: list[Director | OrganisationWatcher] = [build_director(store, settings, runner_kind)]
    if settings.amqp_enabled:
        services.insert(0, OrganisationWatcher(settings.amqp_url, organisation_applier(store, settings)))
    return services


@app.command()
def director(
    runner: Annotated[RunnerKind, typer.Option(help="Where schedulers run.")] = RunnerKind.thread,
    database_url: DatabaseUrl = None,
) -> None:
    """Director (leader) mode: run one scheduler per (organisation, type), started and stopped as
    organisations come and go. Several directors may run; one leads (PostgreSQL advisory lock)."""
    settings = load_settings(database_url=database_url)
    configure_logging(settings.log_level, settings.log_json)
    store = prepare_store(settings)
    services = director_services(store, settings, runner)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    for service in services:
        service.start_in_background()
    stop.wait()
    for service in reversed(services):
        service.stop()


@app.command()
def standalone(
    organisation: Annotated[str, typer.Option(help="Organisation id.")],
    scheduler: Annotated[SchedulerType, typer.Option(help="Scheduler type.")],
    runner_name: Annotated[str, typer.Option(help="Runner name shown in /schedulers.")] = "standalone",
    stop_timeout: Annotated[float, typer.Option(help="Seconds allowed for a graceful stop.")] = 10.0,
    database_url: DatabaseUrl = None,
) -> None:
    """Stand-alone mode: run exactly one scheduler for one organisation in the foreground (what a
    container runs). SIGTERM or SIGINT stop it gracefully; it exits 1 if the stop overruns."""
    settings = load_settings(database_url=database_url)
    configure_logging(settings.log_level, settings.log_json)
    store = open_store(settings)
    if not store.migrations_current():
        raise ConfigurationError(
            f"the database ({describe_database(settings.database_url)}) has no current schema; "
            "run `baton migrate` first (serve and director do it themselves)"
        )
    spec = SchedulerSpec(organisation, scheduler)
    with store.session() as session:
        if session.get(SchedulerRow, spec.id) is None:
            raise ConfigurationError(
                f"organisation '{organisation}' not found (no queue '{spec.id}'); create it first "
                "(POST /organisations or `baton publish organisation-created`)"
            )
    context = SchedulerContext(
        store=store,
        settings=settings,
        runner=runner_name,
        location=process_location(),
        source_factory=source_factory(settings),
    )
    the_scheduler = build_scheduler(spec, context)

    def _on_signal(signum: int, _frame: Any) -> None:
        the_scheduler.stop()
        # The deadline: a stop that hangs must not keep the container alive forever.
        timer = threading.Timer(stop_timeout, lambda: os._exit(1))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        the_scheduler.run()
    except Exception as exc:
        raise typer.Exit(1) from exc
    finally:
        store.dispose()


publish_app = typer.Typer(help="Publish an event to RabbitMQ (BATON_AMQP_URL), to drive Baton by hand.")
app.add_typer(publish_app, name="publish")
AmqpUrl = Annotated[str | None, typer.Option("--amqp-url", help="Overrides BATON_AMQP_URL.")]


def _publish(amqp_url: str | None, send: Callable[[Publisher], None]) -> None:
    url = load_settings(amqp_url=amqp_url).amqp_url
    publisher = Publisher(url, attempts=1)  # a person is waiting: say at once what is wrong
    try:
        send(publisher)
    except AMQP_ERRORS as exc:
        raise amqp_error(exc, url) from exc
    finally:
        publisher.close()


@publish_app.command("organisation-created")
def publish_organisation_created(
    organisation: Annotated[str, typer.Argument(help="Organisation id.")],
    name: Annotated[str | None, typer.Option(help="Display name (defaults to the id).")] = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Announce a new organisation: directors create it and start its three schedulers."""
    event = OrganisationCreated(organisation=OrganisationRef(id=organisation, name=name or organisation))
    _publish(amqp_url, lambda publisher: publisher.publish_organisation(event))
    typer.echo(f"published organisation.created for {organisation}")


@publish_app.command("organisation-deleted")
def publish_organisation_deleted(
    organisation: Annotated[str, typer.Argument(help="Organisation id.")], amqp_url: AmqpUrl = None
) -> None:
    """Announce a deleted organisation: directors delete it and stop its schedulers."""
    event = OrganisationDeleted(organisation=OrganisationRef(id=organisation))
    _publish(amqp_url, lambda publisher: publisher.publish_organisation(event))
    typer.echo(f"published organisation.deleted for {organisation}")


@publish_app.command("scan-profile-mutation")
def publish_scan_profile_mutation(
    organisation: Annotated[str, typer.Argument(help="Organisation id.")],
    object_key: Annotated[str, typer.Option("--object", help="Primary key, e.g. Hostname|internet|example.com")],
    object_type: Annotated[str, typer.Option(help="Object type, e.g. Hostname.")],
    scan_level: Annotated[int, typer.Option(help="Scan level 0-4.")],
    amqp_url: AmqpUrl = None,
) -> None:
    """An object's scan level changed: the boefje scheduler queues the boefjes that apply."""
    event = ScanProfileMutation.model_validate(
        {
            "type": "scan_profile_mutation",
            "object": {"primary_key": object_key, "object_type": object_type, "scan_level": scan_level},
        }
    )
    _publish(amqp_url, lambda publisher: publisher.publish_event(organisation, event))
    typer.echo(f"published scan_profile_mutation for {organisation}")


@publish_app.command("raw-file-received")
def publish_raw_file_received(
    organisation: Annotated[str, typer.Argument(help="Organisation id.")],
    raw_id: Annotated[str, typer.Option(help="Raw file id.")],
    mime_type: Annotated[list[str], typer.Option(help="Mime type; repeat for several.")],
    amqp_url: AmqpUrl = None,
) -> None:
    """A raw file arrived: the normalizer scheduler queues the normalizers that read it."""
    event = RawFileReceived.model_validate(
        {"type": "raw_file_received", "raw_file": {"id": raw_id, "mime_types": mime_type}}
    )
    _publish(amqp_url, lambda publisher: publisher.publish_event(organisation, event))
    typer.echo(f"published raw_file_received for {organisation}")


token_app = typer.Typer(help="API tokens (bearer) for the HTTP API.")
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option(help="A unique name, e.g. the job runner that will use it.")],
    scope: Annotated[
        list[Scope] | None,
        typer.Option(help="Repeat for several: read, pop, push, admin (admin implies all). Default: read + pop."),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a token and print it. Only its hash is stored: it cannot be shown again."""
    settings = load_settings(database_url=database_url)
    store = prepare_store(settings)
    scopes = scope or [Scope.READ, Scope.POP]
    try:
        with store.session() as session:
            token = create_token(session, name, scopes)
    except ConflictError as exc:
        typer.echo(f"baton: error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(token)
    typer.echo(f"token '{name}' created with scopes: {', '.join(sorted(s.value for s in scopes))}", err=True)


@token_app.command("list")
def token_list(database_url: DatabaseUrl = None) -> None:
    """List token names and scopes (never the tokens)."""
    store = prepare_store(load_settings(database_url=database_url))
    with store.session() as session:
        for row in list_tokens(session):
            typer.echo(f"{row.name}\t{','.join(row.scopes)}\t{row.created_at.isoformat()}")


@token_app.command("revoke")
def token_revoke(name: Annotated[str, typer.Argument(help="Token name.")], database_url: DatabaseUrl = None) -> None:
    """Delete a token. Replicas that used it recently accept it for up to 30 s more (cache)."""
    store = prepare_store(load_settings(database_url=database_url))
    try:
        with store.session() as session:
            revoke_token(session, name)
    except NotFoundError as exc:
        typer.echo(f"baton: error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"token '{name}' revoked")


def main(argv: list[str] | None = None) -> None:
    """Run the command line; an error ends it with one line on stderr and exit code 1.

    `--debug` (anywhere on the line) or BATON_DEBUG=1 shows the traceback instead.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("BATON_DEBUG", "").strip().lower() in TRUTHY or "--debug" in args
    args = [arg for arg in args if arg != "--debug"]
    configure_logging(os.environ.get("BATON_LOG_LEVEL", "info"), os.environ.get("BATON_LOG_JSON", "").lower() in TRUTHY)
    try:
        outcome = app(args=args, prog_name="baton", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        print(f"baton: error: {explain(exc)}", file=sys.stderr)
        sys.exit(1)
    sys.exit(outcome if isinstance(outcome, int) else 0)
