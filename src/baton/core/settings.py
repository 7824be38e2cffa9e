"""Configuration from BATON_* environment variables (pydantic-settings); CLI flags override them.

Settings come in groups (`amqp`, `k8s`, `timing`, `recovery`, `leases`) so that each part of Baton
takes only what it needs; every variable keeps its flat `BATON_*` name (BATON_AMQP_URL,
BATON_RETRY_PERIOD_SECONDS, ...).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///baton.db"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SUPPORTED_DATABASES = ("sqlite", "postgresql+psycopg")
# A schema name that needs no quoting anywhere (libpq's options, SQL, search_path).
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def normalise_database_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and route them to psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def check_database_url(url: str) -> str:
    """The scheme only; storage/urls.py reads the rest (and refuses what cannot work, naming it)."""
    if "://" not in url and "=" in url:  # a libpq key/value string: host=... port=... dbname=...
        return url
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in SUPPORTED_DATABASES:
        shown = f"scheme '{scheme}'" if scheme else f"'{url[:60]}'"
        raise ValueError(
            f"unsupported database URL {shown}; use sqlite:///path/baton.db, postgresql://user@host:port/db "
            "(several hosts: host1:port1,host2:port2) or a libpq string (host=... dbname=...)"
        )
    return url


class OpenKatNames(PydanticBaseSettingsSource):
    """Settings from OpenKAT's own variable names (QUEUE_URI, KATALOGUS_API, ...), so that OpenKAT's `.env`
    configures Baton unchanged. The last source: Baton's own name wins when both are set."""

    def __init__(self, settings_cls: type[BaseSettings], names: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.names = names  # field -> OpenKAT's variable

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads every name at once

    def __call__(self) -> dict[str, Any]:
        # An empty value counts as unset: OpenKAT's configuration templates (its `.env-dist`,
        # `/etc/kat/mula.conf`) carry `QUEUE_URI=`, `SCHEDULER_DB_URI=` lines left to fill in.
        environment = {name.upper(): value for name, value in os.environ.items() if value.strip()}
        return {field: environment[name] for field, name in self.names.items() if name in environment}


def with_openkat_names(
    settings_cls: type[BaseSettings], names: Mapping[str, str], *sources: PydanticBaseSettingsSource
) -> tuple[PydanticBaseSettingsSource, ...]:
    return (*sources, OpenKatNames(settings_cls, names))


class AmqpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_AMQP_", extra="ignore")

    url: str = Field(
        "amqp://guest:guest@127.0.0.1:5672/%2F",
        description="RabbitMQ URL (OpenKAT: its `QUEUE_URI`, the broker Octopoes and Bytes publish to).",
    )
    enabled: bool = Field(
        False,
        description="Consume organisation events (directors) and scheduler events (schedulers) from RabbitMQ, "
        "besides the HTTP inbox.",
    )
    prefetch: int = Field(
        500,
        ge=1,
        le=10_000,
        description="Unacked messages a scheduler's consumer of its `{org}__...` queue may hold (at least a "
        "batch); OpenKAT's queues are read with 100, `baton.organisations` with 20.",
    )
    batch: int = Field(
        500,
        ge=1,
        le=10_000,
        description="Events a scheduler turns into tasks per transaction. Not read yet: schedulers take up "
        "to 100 per transaction.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = (init_settings, env_settings, dotenv_settings, file_secret_settings)
        return with_openkat_names(settings_cls, {"url": "QUEUE_URI"}, *sources)


class K8sSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_K8S_", extra="ignore")

    namespace: str | None = Field(
        None,
        description="Namespace of scheduler pods and the Lease; unset: the pod's own in a cluster, else the "
        "kubeconfig context's, else `default`.",
    )
    image: str = Field(
        "baton:0.1.0", description="Image of scheduler pods (the manifests set it to the director's own image)."
    )
    config_map: str | None = Field("baton-config", description="ConfigMap passed to scheduler pods with `envFrom`.")
    secret: str | None = Field("baton-secrets", description="Secret passed to scheduler pods with `envFrom`.")
    owner_deployment: str | None = Field(
        None,
        description="Deployment that owns scheduler pods (their ownerReference); unset: the director's pod, "
        "from `POD_NAME`/`POD_UID`, if known.",
    )
    scheduler_service_account: str = Field("default", description="Service account of scheduler pods.")
    lease_name: str = Field(
        "baton-director", description="`coordination.k8s.io` Lease for leader election (`--runner kubernetes`)."
    )


class TimingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    heartbeat_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="A scheduler whose heartbeat is older than this is shown `failed` (and the leading director "
        "restarts it).",
    )
    poll_interval_seconds: float = Field(1.0, gt=0, description="How often schedulers poll their inputs.")
    reconcile_interval_seconds: float = Field(2.0, gt=0, description="How often the director reconciles.")


class LeaseSettings(BaseSettings):
    """Leadership and scheduler ownership leases (Kubernetes' controller defaults: 15 / 10 / 2 s)."""

    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    lease_seconds: float = Field(
        15.0, gt=0, description="A leadership or scheduler lease not renewed for this long may be taken over."
    )
    renew_deadline_seconds: float = Field(
        10.0, gt=0, description="A holder that cannot renew within this stops acting (before the lease ends)."
    )
    retry_period_seconds: float = Field(
        2.0, gt=0, description="How often leases (and with them heartbeats) are renewed, or taken when free."
    )

    @model_validator(mode="after")
    def _ordered(self) -> LeaseSettings:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "need BATON_RETRY_PERIOD_SECONDS < BATON_RENEW_DEADLINE_SECONDS < BATON_LEASE_SECONDS "
                f"(got {self.retry_period_seconds} / {self.renew_deadline_seconds} / {self.lease_seconds})"
            )
        return self


class RecoverySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    task_timeout_seconds: float = Field(
        1800,
        gt=0,
        description="A dispatched task no runner started (no status change) within this long is handed out "
        "again as a new task; the old one is cancelled, so a runner that still holds it can no longer start it. "
        "Running tasks are not, unless BATON_REQUEUE_RUNNING_TASKS is on.",
    )
    task_max_attempts: int = Field(
        3, ge=1, description="Hand-outs by the task timeout before a task is marked `failed` with the reason."
    )
    running_task_limit_seconds: float | None = Field(
        None,
        ge=0,
        description="A running task with no end reported after this long is marked `failed` with the reason, so "
        "that its object is scanned again at its next rescan; unset: BATON_GRACE_PERIOD_SECONDS; 0: never. "
        "OpenKAT's runners report only when a task starts and when it ends: keep it above the longest run.",
    )
    requeue_running_tasks: bool = Field(
        False,
        description="Also hand out again a running task without an update for BATON_TASK_TIMEOUT_SECONDS (up to "
        "BATON_TASK_MAX_ATTEMPTS; the rule before): for runners whose every run is shorter than the timeout, so "
        "that a silent running task means a dead runner. Not for OpenKAT's: with it on, a run longer than the "
        "timeout is run a second time.",
    )
    task_retention_days: float = Field(
        0,
        ge=0,
        description="0 (the default) keeps every task, as mula does. Otherwise completed, failed and cancelled "
        "tasks are deleted this many days (a fraction too: 0.25 is six hours) after their last change, in small "
        "batches beside the pops and pushes; "
        "OpenKAT's web UI then no longer lists or counts them, and their pages (and the reschedule of an old "
        "task) answer 'not found'. Schedules and the record of when each boefje last ran on an object (rescans, "
        "the grace period) are kept.",
    )
    event_retention_days: float = Field(
        30,
        ge=0,
        description="Inbox events a scheduler consumed (made into tasks, or kept as dead letters) are deleted this "
        "many days (a fraction too) after they were consumed, whatever the tasks' retention; 0 keeps them. Events "
        "not yet consumed are never deleted.",
    )


class OpenKatSettings(BaseSettings):
    """OpenKAT's services. Each also reads OpenKAT's own variable (KATALOGUS_API, OCTOPOES_API, BYTES_API,
    BYTES_USERNAME, BYTES_PASSWORD); without the URLs Baton keeps its own catalogue and calls nothing outside."""

    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    katalogus_url: str | None = Field(
        None, description="KATalogus' URL (also KATALOGUS_API): plugins and organisations come from it when set."
    )
    octopoes_url: str | None = Field(
        None, description="Octopoes' URL (also OCTOPOES_API): objects and their scan levels for rescans."
    )
    bytes_url: str | None = Field(None, description="Bytes' URL (also BYTES_API): when each boefje last ran.")
    bytes_username: str | None = Field(None, description="User Baton logs in to Bytes as (also BYTES_USERNAME).")
    bytes_password: SecretStr | None = Field(None, description="Password of that Bytes user (also BYTES_PASSWORD).")
    katalogus_poll_seconds: float = Field(
        60.0, gt=0, description="How often KATalogus' organisations and plugins are read (mula: 60 s)."
    )
    rescan_interval_seconds: float = Field(
        60.0, gt=0, description="A due rescan schedule becomes a task within this long of its deadline (mula: 60 s)."
    )
    rescan_jitter_seconds: float = Field(
        5 * 3600.0, ge=0, description="Random extra delay, up to this, added to each rescan's grace period."
    )
    deduplicate: bool = Field(
        True,
        description="Deduplication as mula (also BOEFJES_DEDUPLICATE; on in OpenKAT's .env-defaults): a boefje task "
        "gets twins for the organisations KATalogus reports with the same boefje settings that hold the object, and a "
        "boefje pop of more than one task hands out the tasks sharing the first one's deduplication_key together.",
    )
    openkat_timeout_seconds: float = Field(
        10.0, gt=0, description="Timeout of one request to KATalogus, Octopoes or Bytes (mula: 10 s)."
    )
    openkat_retries: int = Field(
        3, ge=0, le=10, description="Retries of a request that failed to connect, timed out or got a 5xx."
    )
    openkat_max_connections: int = Field(
        10, ge=1, le=1000, description="Connections Baton keeps open to each of KATalogus, Octopoes and Bytes."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = (init_settings, env_settings, dotenv_settings, file_secret_settings)
        return with_openkat_names(settings_cls, OPENKAT_SERVICE_NAMES, *sources)

    @field_validator("katalogus_url", "octopoes_url", "bytes_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"'{value[:60]}' is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _bytes_login(self) -> OpenKatSettings:
        if self.bytes_url and not (self.bytes_username and self.bytes_password):
            raise ValueError("Bytes needs BATON_BYTES_USERNAME and BATON_BYTES_PASSWORD (or BYTES_USERNAME/PASSWORD)")
        return self


# OpenKAT's variable for each of OpenKatSettings' fields (OpenKAT's .env-defaults and .env-dist).
OPENKAT_SERVICE_NAMES = {
    "katalogus_url": "KATALOGUS_API",
    "octopoes_url": "OCTOPOES_API",
    "bytes_url": "BYTES_API",
    "bytes_username": "BYTES_USERNAME",
    "bytes_password": "BYTES_PASSWORD",
    "deduplicate": "BOEFJES_DEDUPLICATE",
}


# mula's own variables for Settings' fields (its `/etc/kat/mula.conf`, its compose service's `.env`):
# where it kept its state and where it listened, so rocky and the runners find Baton at mula's address.
OPENKAT_SCHEDULER_NAMES = {
    "database_url": "SCHEDULER_DB_URI",
    "host": "SCHEDULER_API_HOST",
    "port": "SCHEDULER_API_PORT",
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="The store: `sqlite:///path/baton.db` (one process), or PostgreSQL as a URL "
        "(`postgresql://user@host:port/db`; several hosts too, as `pg_autoctl show uri` prints them) or a libpq "
        "key/value string; what it leaves out comes from the PG* variables (also SCHEDULER_DB_URI, mula's).",
    )
    database_schema: str | None = Field(
        None,
        description="PostgreSQL only: keep Baton's tables in this schema of the database (created by `baton "
        "migrate`), e.g. `baton` to share OpenKAT's scheduler database with mula's tables; unset: the "
        "database's default (`public`).",
    )
    host: str = Field(
        "127.0.0.1", description="Address the HTTP API listens on (also SCHEDULER_API_HOST, where mula listened)."
    )
    port: int = Field(
        8000, ge=1, le=65535, description="Port the HTTP API listens on (also SCHEDULER_API_PORT, mula's port)."
    )
    workers: int = Field(
        1, ge=1, le=64, description="API processes of one `baton serve` (its director runs once, in the parent)."
    )
    http_server: Literal["uvicorn", "granian"] = Field(
        "uvicorn",
        description="The HTTP server `baton serve` runs the API on: `uvicorn`, or `granian` (Rust; its API "
        "processes are always children of `baton serve`, which runs the director, even with BATON_WORKERS=1).",
    )
    scheduler_threads: int = Field(
        8,
        ge=1,
        le=24,
        description="Threads that run the schedulers' turns in a `baton worker` or a thread-runner director (one "
        "connection each, of the 30 the process's database pool has).",
    )
    queue_maxsize: int = Field(
        10_000,
        ge=0,
        description="Queued tasks per queue, for organisations created from now on (0: unbounded); a push "
        "beyond it answers 429.",
    )
    max_data_bytes: int = Field(
        64 * 1024, ge=1, description="Largest task `data` a push may send, in JSON bytes; beyond it 413."
    )
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="Largest request body accepted; beyond it 413.")
    grace_period_seconds: float = Field(
        86_400, ge=0, description="A (boefje, object) pair is not queued again sooner than this."
    )
    fairness: bool = Field(
        True,
        description="Pops across organisations take turns among equal priorities (weighted fair queuing); false: "
        "strict priority, then age.",
    )
    auto_organisations: bool = Field(
        True,
        description="Create an organisation when OpenKAT's messages or dialect name one Baton does not know yet "
        "(OpenKAT announces none).",
    )
    pop_max_wait_seconds: float = Field(
        30.0, ge=0, le=3600, description="Longest `?wait=` a pop may ask for (long-poll); 0 turns long-poll off."
    )
    pop_max_waiters: int = Field(
        1000,
        ge=0,
        description="Pops one API process lets wait at once; a pop beyond it with nothing to hand out gets 429.",
    )
    group_pops: bool = Field(
        True,
        description="PostgreSQL: pops of one queue (or type) that arrive while one is on its way to the database "
        "share the next statement, instead of one statement each.",
    )
    pop_receipt_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="How long a pop's idempotency key (`Idempotency-Key` header, or `idempotency_key`) holds: "
        "the same key on the same queue within this answers the tasks the first attempt took, not new ones.",
    )
    db_wait_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Longest a request waits for the database, whatever it tries (a pooled connection, a "
        "statement, a second path): then it answers 503 with Retry-After.",
    )
    pop_recheck_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often waiting pops look again without a wake-up: SQLite (another process may write the "
        "file) and PostgreSQL while the LISTEN connection is down.",
    )
    pop_listen_check_seconds: float = Field(
        10.0,
        gt=0,
        le=60,
        description="PostgreSQL: how often the connection that listens for queued tasks while pops wait is "
        "checked (asked a query); it closes after two checks in a row found no waiting pop.",
    )
    auth: Literal["auto", "on", "off"] = Field(
        "auto", description="Bearer tokens: 'auto' requires them unless the API listens on loopback only."
    )
    plugins_file: str | None = Field(
        None,
        description="YAML plugin catalogue seeded by `baton migrate` and `baton serve`; unset: the built-in one "
        "(`src/baton/ingest/plugins.yml`).",
    )
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    log_json: bool = Field(False, description="Log as JSON lines instead of console text.")
    amqp: AmqpSettings = Field(
        default_factory=AmqpSettings, description="RabbitMQ: where events come from besides the HTTP inbox."
    )
    k8s: K8sSettings = Field(
        default_factory=K8sSettings,
        description="Kubernetes: the pods `baton director --runner kubernetes` creates, and its Lease.",
    )
    timing: TimingSettings = Field(
        default_factory=TimingSettings, description="Timing: heartbeats, polling and reconciling."
    )
    leases: LeaseSettings = Field(
        default_factory=LeaseSettings,
        description="Leases: leadership and scheduler ownership (Kubernetes' controller defaults: 15 / 10 / 2 s); "
        "they must keep retry period < renew deadline < lease.",
    )
    recovery: RecoverySettings = Field(
        default_factory=RecoverySettings,
        description="Housekeeping: what happens to a task nobody reports on, and how long finished tasks are kept "
        "(done by the leading director, or by one `baton worker` at a time).",
    )
    openkat: OpenKatSettings = Field(
        default_factory=OpenKatSettings,
        description="OpenKAT's services: KATalogus, Octopoes and Bytes, when Baton uses them (each also read under "
        "OpenKAT's own variable name; Baton's name wins).",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = (init_settings, env_settings, dotenv_settings, file_secret_settings)
        return with_openkat_names(settings_cls, OPENKAT_SCHEDULER_NAMES, *sources)

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, data: Any) -> Any:
        """Accept each group's settings by their flat names too (`poll_interval_seconds=0.05`,
        `amqp_url=...`), as the environment spells them; the rest of a group still comes from the
        environment."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for group, (model, prefix) in GROUPS.items():
            given = {}
            for name in model.model_fields:
                flat = prefix + name
                if flat in data:
                    given[name] = data.pop(flat)
            current = data.get(group)
            if isinstance(current, BaseSettings):
                current = current.model_dump()
            if given or isinstance(current, dict):
                data[group] = model(**{**(current or {}), **given})
        return data

    @property
    def auth_required(self) -> bool:
        if self.auth == "auto":
            return self.host not in LOOPBACK_HOSTS
        return self.auth == "on"

    @field_validator("database_url")
    @classmethod
    def _normalise_url(cls, value: str) -> str:
        return check_database_url(normalise_database_url(value))

    @field_validator("database_schema")
    @classmethod
    def _schema_name(cls, value: str | None) -> str | None:
        """A name; that the database is PostgreSQL is checked where the URL is read (storage/urls.py), after
        the command line's --database-url."""
        if value is None or value == "":
            return None
        if not SCHEMA_NAME.match(value):
            raise ValueError("a schema name of lower-case letters, digits and '_' (at most 63), e.g. baton")
        return value


# Each group's field in Settings, its model and the prefix of its flat names.
GROUPS: dict[str, tuple[type[BaseSettings], str]] = {
    "amqp": (AmqpSettings, "amqp_"),
    "k8s": (K8sSettings, "k8s_"),
    "timing": (TimingSettings, ""),
    "leases": (LeaseSettings, ""),
    "recovery": (RecoverySettings, ""),
    "openkat": (OpenKatSettings, ""),
}
# The prefix of each group's variables, to name a bad one in an error message.
GROUP_PREFIXES = {
    "AmqpSettings": "BATON_AMQP_",
    "K8sSettings": "BATON_K8S_",
    "TimingSettings": "BATON_",
    "LeaseSettings": "BATON_",
    "RecoverySettings": "BATON_",
    "OpenKatSettings": "BATON_",
    "Settings": "BATON_",
}
