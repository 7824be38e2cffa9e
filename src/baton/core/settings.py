"""Configuration from BATON_* environment variables (pydantic-settings); CLI flags override them.

Settings come in groups (`amqp`, `k8s`, `timing`, `recovery`, `leases`) so that each part of Baton
takes only what it needs; every variable keeps its flat `BATON_*` name (BATON_AMQP_URL,
BATON_RETRY_PERIOD_SECONDS, ...).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///baton.db"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SUPPORTED_DATABASES = ("sqlite", "postgresql+psycopg")


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


class AmqpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_AMQP_", extra="ignore")

    url: str = Field("amqp://guest:guest@127.0.0.1:5672/%2F", description="RabbitMQ URL.")
    enabled: bool = Field(False, description="Consume organisation and scheduler events from RabbitMQ.")
    prefetch: int = Field(500, ge=1, le=10_000, description="Unacked messages a consumer may hold.")
    batch: int = Field(500, ge=1, le=10_000, description="Events a scheduler turns into tasks per transaction.")


class K8sSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_K8S_", extra="ignore")

    namespace: str | None = Field(None, description="Namespace for scheduler pods (default: the director's).")
    image: str = Field("baton:0.1.0", description="Image of scheduler pods.")
    config_map: str | None = Field("baton-config", description="ConfigMap passed to scheduler pods as env.")
    secret: str | None = Field("baton-secrets", description="Secret passed to scheduler pods as env.")
    owner_deployment: str | None = Field(
        None, description="Deployment that owns scheduler pods (default: the director's pod, if known)."
    )
    scheduler_service_account: str = Field("default", description="Service account of scheduler pods.")
    lease_name: str = Field("baton-director", description="Lease used for leader election in Kubernetes.")


class TimingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    heartbeat_timeout_seconds: float = Field(
        30.0, gt=0, description="A scheduler whose heartbeat is older than this is shown failed."
    )
    poll_interval_seconds: float = Field(1.0, gt=0, description="How often schedulers poll their inputs.")
    reconcile_interval_seconds: float = Field(2.0, gt=0, description="How often the director reconciles.")


class LeaseSettings(BaseSettings):
    """Leadership and scheduler ownership leases (Kubernetes' controller defaults: 15 / 10 / 2 s)."""

    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    lease_seconds: float = Field(15.0, gt=0, description="A lease not renewed for this long may be taken over.")
    renew_deadline_seconds: float = Field(
        10.0, gt=0, description="A holder that cannot renew within this stops acting (before the lease ends)."
    )
    retry_period_seconds: float = Field(2.0, gt=0, description="How often leases are renewed or tried.")

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
        1800, gt=0, description="A dispatched/running task without an update for this long is re-queued."
    )
    task_max_attempts: int = Field(3, ge=1, description="Re-queues before a stuck task is marked failed.")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="The store: sqlite:///path, a postgresql:// URL (several hosts too) or a libpq string.",
    )
    host: str = Field("127.0.0.1", description="Address the HTTP API listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port the HTTP API listens on.")
    workers: int = Field(1, ge=1, le=64, description="API worker processes of one `baton serve`.")
    scheduler_threads: int = Field(
        8,
        ge=1,
        le=24,
        description="Threads that run the schedulers' turns in a `baton worker` or a thread-runner director (one "
        "connection each, of the 30 the process's database pool has).",
    )
    queue_maxsize: int = Field(10_000, ge=0, description="Queued tasks per queue; 0 means unbounded.")
    max_data_bytes: int = Field(64 * 1024, ge=1, description="Largest JSON `data` accepted per task.")
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="Largest request body accepted.")
    grace_period_seconds: float = Field(
        86_400, ge=0, description="How long before the same boefje runs on the same object again."
    )
    fairness: bool = Field(
        True, description="Pops across organisations serve the least-served organisation first among equals."
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
    pop_recheck_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often waiting pops look again without a wake-up: SQLite (another process may write the "
        "file) and PostgreSQL while the LISTEN connection is down.",
    )
    auth: Literal["auto", "on", "off"] = Field(
        "auto", description="Bearer tokens: 'auto' requires them unless the API listens on loopback only."
    )
    plugins_file: str | None = Field(None, description="YAML plugin catalogue seeded on migrate.")
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    log_json: bool = Field(False, description="Log as JSON lines instead of console text.")
    amqp: AmqpSettings = Field(default_factory=AmqpSettings)
    k8s: K8sSettings = Field(default_factory=K8sSettings)
    timing: TimingSettings = Field(default_factory=TimingSettings)
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
    recovery: RecoverySettings = Field(default_factory=RecoverySettings)

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


# Each group's field in Settings, its model and the prefix of its flat names.
GROUPS: dict[str, tuple[type[BaseSettings], str]] = {
    "amqp": (AmqpSettings, "amqp_"),
    "k8s": (K8sSettings, "k8s_"),
    "timing": (TimingSettings, ""),
    "leases": (LeaseSettings, ""),
    "recovery": (RecoverySettings, ""),
}
# The prefix of each group's variables, to name a bad one in an error message.
GROUP_PREFIXES = {
    "AmqpSettings": "BATON_AMQP_",
    "K8sSettings": "BATON_K8S_",
    "TimingSettings": "BATON_",
    "LeaseSettings": "BATON_",
    "RecoverySettings": "BATON_",
    "Settings": "BATON_",
}
