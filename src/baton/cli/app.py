"""The `baton` commands: parse arguments, load settings, hand over to baton.runtime."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from baton import __version__
from baton.cli.errors import settings_error
from baton.core.errors import BatonError, ConfigurationError
from baton.core.logging import configure_logging
from baton.core.model import RunnerKind, SchedulerSpec, SchedulerType, utcnow
from baton.core.settings import Settings

app = typer.Typer(
    help="Baton: priority queues of scanning work per organisation, served over HTTP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Database URL or libpq string; overrides BATON_DATABASE_URL (default sqlite:///baton.db).",
    ),
]


def load_settings(**overrides: Any) -> Settings:
    """Environment first, then whichever command-line flags were given; logging configured."""
    try:
        settings = Settings()
        given = {key: value for key, value in overrides.items() if value is not None}
        if given:
            settings = Settings.model_validate({**settings.model_dump(), **given})
    except ValidationError as exc:
        raise settings_error(exc) from exc
    configure_logging(settings.log_level, settings.log_json)
    return settings


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


@app.command()
def migrate(database_url: DatabaseUrl = None) -> None:
    """Create or upgrade the database schema and seed the plugin catalogue (safe to run repeatedly)."""
    from baton.runtime import prepare_store

    store = prepare_store(load_settings(database_url=database_url))
    typer.echo(f"{store.address.describe()} is up to date")


@app.command("import-mula")
def import_mula(
    mula_database_url: Annotated[
        str,
        typer.Argument(
            envvar="SCHEDULER_DB_URI",
            show_envvar=True,
            help="mula's PostgreSQL database (OpenKAT's SCHEDULER_DB_URI), read in one read-only snapshot.",
        ),
    ],
    database_url: DatabaseUrl = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Read and count what would be imported; write nothing, not even migrations."),
    ] = False,
    if_present: Annotated[
        bool,
        typer.Option(
            "--if-present", help="A database without mula's tables (a new installation): nothing to import, exit 0."
        ),
    ] = False,
) -> None:
    """Take over mula's state: its schedules, tasks (same ids and statuses), their organisations and the
    grace period's memory, into Baton's database (migrated first). Run it once, with mula stopped, before
    Baton's first start; a run again changes nothing. Never writes to mula's database."""
    from baton.cli.mula_import import progress, summary
    from baton.runtime import prepare_store
    from baton.service.mula_import import TargetSpec
    from baton.service.mula_import import import_mula as run_import

    settings = load_settings(database_url=database_url)
    report = run_import(
        mula_database_url,
        TargetSpec(settings.database_url, settings.database_schema, settings.queue_maxsize),
        prepare=lambda: prepare_store(settings),
        progress=progress(),
        dry_run=dry_run,
        if_present=if_present,
    )
    for line in summary(report):
        typer.echo(line)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Listen address; overrides BATON_HOST (127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port; overrides BATON_PORT (8000).")] = None,
    workers: Annotated[int | None, typer.Option(help="API processes; overrides BATON_WORKERS (1).")] = None,
    database_url: DatabaseUrl = None,
    no_director: Annotated[bool, typer.Option("--no-director", help="Serve the API only.")] = False,
) -> None:
    """Run the HTTP API and, unless --no-director, a director with the thread runner in this process.

    The embedded default: SQLite in ./baton.db, nothing else to install. Applies migrations first.
    """
    from baton.runtime import serve as run_server

    run_server(load_settings(host=host, port=port, workers=workers, database_url=database_url), not no_director)


@app.command()
def director(
    runner: Annotated[RunnerKind, typer.Option(help="Where schedulers run.")] = RunnerKind.thread,
    database_url: DatabaseUrl = None,
) -> None:
    """Director (leader) mode: run one scheduler per (organisation, type), started and stopped as
    organisations come and go. Several directors may run; one leads."""
    from baton.runtime import run_director

    run_director(load_settings(database_url=database_url), runner)


@app.command()
def standalone(
    organisation: Annotated[str, typer.Option(help="Organisation id.")],
    scheduler: Annotated[SchedulerType, typer.Option(help="Scheduler type.")],
    runner_name: Annotated[str, typer.Option(help="Runner name shown in /schedulers.")] = "standalone",
    stop_timeout: Annotated[float, typer.Option(help="Seconds allowed for a graceful stop.")] = 10.0,
    leader_term: Annotated[
        int | None, typer.Option(help="Claim the scheduler only while this director term leads.", hidden=True)
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Stand-alone mode: run exactly one scheduler for one organisation in the foreground (what a
    container runs). SIGTERM or SIGINT stop it gracefully; it exits 1 if the stop overruns."""
    from baton.runtime import run_standalone

    settings = load_settings(database_url=database_url)
    run_standalone(settings, SchedulerSpec(organisation, scheduler), runner_name, stop_timeout, leader_term)


@app.command()
def worker(database_url: DatabaseUrl = None) -> None:
    """Worker mode: run a fair share of all schedulers as threads, shared with every other worker on
    the same PostgreSQL (claimed with leases, handed over on SIGTERM, taken over when one dies).
    Scale by adding workers; run workers instead of a director, not beside one."""
    from baton.runtime import run_worker

    run_worker(load_settings(database_url=database_url))


publish_app = typer.Typer(help="Publish an event to RabbitMQ (BATON_AMQP_URL), to drive Baton by hand.")
app.add_typer(publish_app, name="publish")
AmqpUrl = Annotated[str | None, typer.Option("--amqp-url", help="Overrides BATON_AMQP_URL.")]


def _publish(amqp_url: str | None, send: Callable[[Any], None]) -> None:
    from baton.ingest.rabbitmq import AMQP_ERRORS, Publisher, amqp_error

    url = Settings().amqp.url if amqp_url is None else amqp_url
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
    from baton.ingest.events import OrganisationCreated, OrganisationRef

    load_settings()
    event = OrganisationCreated(organisation=OrganisationRef(id=organisation, name=name or organisation))
    _publish(amqp_url, lambda publisher: publisher.publish_organisation(event))
    typer.echo(f"published organisation.created for {organisation}")


@publish_app.command("organisation-deleted")
def publish_organisation_deleted(
    organisation: Annotated[str, typer.Argument(help="Organisation id.")], amqp_url: AmqpUrl = None
) -> None:
    """Announce a deleted organisation: directors delete it and stop its schedulers."""
    from baton.ingest.events import OrganisationDeleted, OrganisationRef

    load_settings()
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
    from baton.ingest.events import ScanProfileMutation

    load_settings()
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
    from baton.ingest.events import RawFileReceived

    load_settings()
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
        list[str] | None,
        typer.Option(help="Repeat for several: read, pop, push, admin (admin implies all). Default: read + pop."),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a token and print it. Only its hash is stored: it cannot be shown again."""
    from baton.runtime import prepare_store
    from baton.service.tokens import Scope, create_token

    try:
        scopes = [Scope(value) for value in scope] if scope else [Scope.READ, Scope.POP]
    except ValueError as exc:
        raise ConfigurationError(f"--scope: {exc}; one of read, pop, push, admin") from exc
    store = prepare_store(load_settings(database_url=database_url))
    with store.session() as session:
        token = create_token(session, name, scopes)
    typer.echo(token)
    typer.echo(f"token '{name}' created with scopes: {', '.join(sorted(s.value for s in scopes))}", err=True)


@token_app.command("list")
def token_list(database_url: DatabaseUrl = None) -> None:
    """List token names and scopes (never the tokens)."""
    from baton.runtime import prepare_store
    from baton.service.tokens import list_tokens

    store = prepare_store(load_settings(database_url=database_url))
    with store.session() as session:
        for row in list_tokens(session):
            typer.echo(f"{row.name}\t{','.join(row.scopes)}\t{row.created_at.isoformat()}")


@token_app.command("revoke")
def token_revoke(name: Annotated[str, typer.Argument(help="Token name.")], database_url: DatabaseUrl = None) -> None:
    """Delete a token. Replicas that used it recently accept it for up to 30 s more (cache)."""
    from baton.runtime import prepare_store
    from baton.service.tokens import revoke_token

    store = prepare_store(load_settings(database_url=database_url))
    with store.session() as session:
        revoke_token(session, name)
    typer.echo(f"token '{name}' revoked")


probe_app = typer.Typer(help="Container health probes: exit 0 when healthy, else 1 with one line on stderr.")
app.add_typer(probe_app, name="probe")
Live = Annotated[
    bool,
    typer.Option("--live", help="Pass while the database is unreachable: an outage restarts nothing (livenessProbe)."),
]
Stale = Annotated[float, typer.Option("--stale", help="Seconds without a renewal that mean hung.")]
T = TypeVar("T")


class UnhealthyError(BatonError):
    def __init__(self, problem: str) -> None:
        super().__init__(f"unhealthy: {problem}")


def _probe_read(live: bool, read: Callable[[], T]) -> T:
    """The probe's database read; with --live an unreachable database passes the probe."""
    from baton.storage.control.liveness import DatabaseUnreachableError

    try:
        return read()
    except DatabaseUnreachableError as exc:
        if live:
            raise typer.Exit() from exc
        raise UnhealthyError(f"database unreachable: {exc}") from exc


@probe_app.command("api")
def probe_api(port: Annotated[int | None, typer.Option(help="Overrides BATON_PORT (8000).")] = None) -> None:
    """Ready to serve: GET /ready on this host answers 200 (the database answers, migrations are current)."""
    import httpx

    from baton.core.diagnosis import reason

    url = f"http://127.0.0.1:{load_settings(port=port).port}/ready"
    try:
        status = httpx.get(url, timeout=3).status_code
    except httpx.HTTPError as exc:
        raise UnhealthyError(f"{url}: {reason(exc)}") from exc
    if status != 200:
        raise UnhealthyError(f"/ready answered {status}")


@probe_app.command("director")
def probe_director(live: Live = False, stale: Stale = 60.0, database_url: DatabaseUrl = None) -> None:
    """The database answers and, if this container leads, it renewed its leadership lately.

    It leads when the `leaders` row's holder is `<hostname>:<pid>` or $POD_NAME, and it must have
    renewed the row within --stale seconds. A standby writes nothing, so a hung standby passes.
    """
    from baton.core.heartbeat import is_overdue
    from baton.storage.control.liveness import director_renewal

    settings = load_settings(database_url=database_url)
    renewal = _probe_read(live, lambda: director_renewal(settings.database_url, settings.database_schema))
    hostname = os.uname().nodename
    if renewal is None or (
        renewal.holder.rsplit(":", 1)[0] != hostname and renewal.holder != os.environ.get("POD_NAME", hostname)
    ):
        return
    now = utcnow()
    if is_overdue(renewal.renewed_at, now, stale):
        raise UnhealthyError(f"leading but last renewed {(now - renewal.renewed_at).total_seconds():.0f} s ago")


@probe_app.command("worker")
def probe_worker(live: Live = False, stale: Stale = 60.0, database_url: DatabaseUrl = None) -> None:
    """This container's `baton worker` renewed its row in `workers` lately.

    Lately: within --stale seconds. Without --live, a worker that has not registered yet is not
    ready; with --live that passes.
    """
    from baton.core.heartbeat import is_overdue
    from baton.storage.control.liveness import worker_heartbeats

    settings = load_settings(database_url=database_url)
    heartbeats = _probe_read(
        live, lambda: worker_heartbeats(settings.database_url, os.uname().nodename, settings.database_schema)
    )
    if not heartbeats:
        if live:
            return
        raise UnhealthyError("this worker has not registered yet")
    newest, now = max(heartbeats), utcnow()
    if is_overdue(newest, now, stale):
        raise UnhealthyError(f"worker row last renewed {(now - newest).total_seconds():.0f} s ago")
