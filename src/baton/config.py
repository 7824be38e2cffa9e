"""Configuration from BATON_* environment variables (pydantic-settings); CLI flags override them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///baton.db"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def normalise_database_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and route them to psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


SUPPORTED_DATABASES = ("sqlite", "postgresql+psycopg")


def check_database_url(url: str) -> str:
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in SUPPORTED_DATABASES:
        shown = f"scheme '{scheme}'" if scheme else f"'{url[:60]}'"
        raise ValueError(
            f"unsupported database URL {shown}; use sqlite:///path/baton.db or postgresql://user@host:port/db"
        )
    return url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore")

    database_url: str = Field(DEFAULT_DATABASE_URL, description="SQLAlchemy URL of the store.")
    amqp_url: str = Field("amqp://guest:guest@127.0.0.1:5672/%2F", description="RabbitMQ URL.")
    amqp_enabled: bool = Field(
        False, description="Consume organisation and scheduler events from RabbitMQ (besides the HTTP inbox)."
    )
    amqp_prefetch: int = Field(100, ge=1, le=10_000, description="Unacked messages a consumer may hold.")
    host: str = Field("127.0.0.1", description="Address the HTTP API listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port the HTTP API listens on.")
    queue_maxsize: int = Field(10_000, ge=0, description="Queued tasks per queue; 0 means unbounded.")
    max_data_bytes: int = Field(64 * 1024, ge=1, description="Largest JSON `data` accepted per task.")
    grace_period_seconds: float = Field(
        86_400, ge=0, description="How long before the same boefje runs on the same object again."
    )
    heartbeat_interval_seconds: float = Field(5.0, gt=0, description="How often schedulers heartbeat.")
    heartbeat_timeout_seconds: float = Field(
        30.0, gt=0, description="A scheduler whose heartbeat is older than this is shown failed."
    )
    poll_interval_seconds: float = Field(1.0, gt=0, description="How often schedulers poll their inputs.")
    reconcile_interval_seconds: float = Field(2.0, gt=0, description="How often the director reconciles.")
    auth: Literal["auto", "on", "off"] = Field(
        "auto", description="Bearer tokens: 'auto' requires them unless the API listens on loopback only."
    )
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="Largest request body accepted.")
    task_timeout_seconds: float = Field(
        1800, gt=0, description="A dispatched/running task without an update for this long is re-queued."
    )
    task_max_attempts: int = Field(3, ge=1, description="Re-queues before a stuck task is marked failed.")
    k8s_namespace: str | None = Field(None, description="Namespace for scheduler pods (default: the director's).")
    k8s_image: str = Field("baton:0.1.0", description="Image of scheduler pods.")
    k8s_config_map: str | None = Field("baton-config", description="ConfigMap passed to scheduler pods as env.")
    k8s_secret: str | None = Field("baton-secrets", description="Secret passed to scheduler pods as env.")
    k8s_owner_deployment: str | None = Field(
        None, description="Deployment that owns scheduler pods (default: the director's pod, if known)."
    )
    k8s_scheduler_service_account: str = Field("default", description="Service account of scheduler pods.")
    k8s_lease_name: str = Field("baton-director", description="Lease used for leader election in Kubernetes.")
    plugins_file: str | None = Field(None, description="YAML plugin catalogue seeded on migrate.")
    log_level: str = Field("info", description="Log level: debug, info, warning, error.")
    log_json: bool = Field(False, description="Log as JSON lines instead of console text.")

    @property
    def auth_required(self) -> bool:
        if self.auth == "auto":
            return self.host not in LOOPBACK_HOSTS
        return self.auth == "on"

    @field_validator("database_url")
    @classmethod
    def _normalise_url(cls, value: str) -> str:
        return check_database_url(normalise_database_url(value))
