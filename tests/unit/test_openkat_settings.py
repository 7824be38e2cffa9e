"""OpenKAT's own variable names configure Baton (its `.env` unchanged); Baton's own names win."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from baton.core.settings import Settings
from baton.openkat import OpenKatClients, connect

OPENKAT_NAMES = ("KATALOGUS_API", "OCTOPOES_API", "BYTES_API", "BYTES_USERNAME", "BYTES_PASSWORD", "QUEUE_URI")
BATON_NAMES = (
    "BATON_KATALOGUS_URL",
    "BATON_OCTOPOES_URL",
    "BATON_BYTES_URL",
    "BATON_BYTES_USERNAME",
    "BATON_BYTES_PASSWORD",
    "BATON_AMQP_URL",
    "BATON_DATABASE_URL",
    "BATON_KATALOGUS_POLL_SECONDS",
    "BATON_RESCAN_INTERVAL_SECONDS",
    "BATON_RESCAN_JITTER_SECONDS",
    "BATON_OPENKAT_RETRIES",
    "BATON_HOST",
    "BATON_PORT",
)
MULA_NAMES = ("SCHEDULER_DB_URI", "SCHEDULER_API_HOST", "SCHEDULER_API_PORT")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*OPENKAT_NAMES, *BATON_NAMES, *MULA_NAMES):
        monkeypatch.delenv(name, raising=False)


def openkat_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values OpenKAT's .env-defaults and .env-dist give (compose service names, generated secrets)."""
    monkeypatch.setenv("KATALOGUS_API", "http://katalogus:8000")
    monkeypatch.setenv("OCTOPOES_API", "http://octopoes_api:80")
    monkeypatch.setenv("BYTES_API", "http://bytes:8000")
    monkeypatch.setenv("BYTES_USERNAME", "bytes-user")
    monkeypatch.setenv("BYTES_PASSWORD", "bytes-secret")
    monkeypatch.setenv("QUEUE_URI", "amqp://kat:queue-secret@rabbitmq:5672/kat")
    monkeypatch.setenv("SCHEDULER_DB_URI", "postgresql://scheduler_app:db-secret@postgres:5432/scheduler")


def test_without_openkat_settings_nothing_outside_is_configured() -> None:
    settings = Settings()
    assert settings.openkat.katalogus_url is None
    assert settings.openkat.octopoes_url is None
    assert settings.openkat.bytes_url is None
    assert settings.database_url == "sqlite:///baton.db"
    assert settings.amqp.url == "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_defaults_follow_mula() -> None:
    openkat = Settings().openkat
    assert openkat.katalogus_poll_seconds == 60  # SCHEDULER_MONITOR_ORGANISATIONS_INTERVAL
    assert openkat.rescan_interval_seconds == 60  # SCHEDULER_PQ_INTERVAL
    assert openkat.rescan_jitter_seconds == 5 * 3600  # mula's uniform(0, 5 h)
    assert openkat.openkat_timeout_seconds == 10  # SCHEDULER_*_REQUEST_TIMEOUT


def test_openkat_env_configures_baton(monkeypatch: pytest.MonkeyPatch) -> None:
    openkat_env(monkeypatch)
    settings = Settings()
    assert settings.openkat.katalogus_url == "http://katalogus:8000"
    assert settings.openkat.octopoes_url == "http://octopoes_api:80"
    assert settings.openkat.bytes_url == "http://bytes:8000"
    assert settings.openkat.bytes_username == "bytes-user"
    assert settings.openkat.bytes_password is not None
    assert settings.openkat.bytes_password.get_secret_value() == "bytes-secret"
    assert settings.amqp.url == "amqp://kat:queue-secret@rabbitmq:5672/kat"
    # SCHEDULER_DB_URI is a plain postgresql:// URL: routed to psycopg 3 like BATON_DATABASE_URL.
    assert settings.database_url == "postgresql+psycopg://scheduler_app:db-secret@postgres:5432/scheduler"


def test_baton_names_win_over_openkat_names(monkeypatch: pytest.MonkeyPatch) -> None:
    openkat_env(monkeypatch)
    monkeypatch.setenv("BATON_KATALOGUS_URL", "http://baton-katalogus:9000")
    monkeypatch.setenv("BATON_BYTES_PASSWORD", "baton-secret")
    monkeypatch.setenv("BATON_AMQP_URL", "amqp://baton@broker/%2F")
    monkeypatch.setenv("BATON_DATABASE_URL", "sqlite:///baton-own.db")
    settings = Settings()
    assert settings.openkat.katalogus_url == "http://baton-katalogus:9000"
    assert settings.openkat.octopoes_url == "http://octopoes_api:80"  # only OpenKAT's name set
    assert settings.openkat.bytes_password is not None
    assert settings.openkat.bytes_password.get_secret_value() == "baton-secret"
    assert settings.amqp.url == "amqp://baton@broker/%2F"
    assert settings.database_url == "sqlite:///baton-own.db"


def test_arguments_win_over_both_names(monkeypatch: pytest.MonkeyPatch) -> None:
    openkat_env(monkeypatch)
    monkeypatch.setenv("BATON_KATALOGUS_URL", "http://baton-katalogus:9000")
    settings = Settings(katalogus_url="http://flag:1", amqp_url="amqp://flag/%2F", database_url="sqlite:///flag.db")
    assert settings.openkat.katalogus_url == "http://flag:1"
    assert settings.amqp.url == "amqp://flag/%2F"
    assert settings.database_url == "sqlite:///flag.db"


def test_baton_listens_where_mula_listened(monkeypatch: pytest.MonkeyPatch) -> None:
    # /etc/kat/mula.conf (OpenKAT's Debian package): rocky and the runners call SCHEDULER_API=http://localhost:8004.
    monkeypatch.setenv("SCHEDULER_API_HOST", "localhost")
    monkeypatch.setenv("SCHEDULER_API_PORT", "8004")
    settings = Settings()
    assert (settings.host, settings.port) == ("localhost", 8004)
    assert not settings.auth_required  # loopback, as mula's: OpenKAT's clients send no token

    monkeypatch.setenv("BATON_PORT", "9000")
    assert (Settings().host, Settings().port) == ("localhost", 9000)
    monkeypatch.setenv("BATON_HOST", "0.0.0.0")
    assert Settings().host == "0.0.0.0"
    assert Settings(port=9100).port == 9100  # a flag wins over both


def test_a_bad_mula_port_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULER_API_PORT", "http")
    with pytest.raises(ValidationError, match="port"):
        Settings()


def test_empty_openkat_values_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenKAT's mula.conf as its package installs it: the lines are there, the values left to fill in.
    for name in ("QUEUE_URI", "SCHEDULER_DB_URI", "BYTES_PASSWORD", "SCHEDULER_API_PORT"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("KATALOGUS_API", "  ")
    settings = Settings()
    assert settings.database_url == "sqlite:///baton.db"
    assert settings.amqp.url == "amqp://guest:guest@127.0.0.1:5672/%2F"
    assert settings.port == 8000
    assert settings.openkat.katalogus_url is None


def test_timing_settings_read_their_baton_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_KATALOGUS_POLL_SECONDS", "5")
    monkeypatch.setenv("BATON_RESCAN_INTERVAL_SECONDS", "2.5")
    monkeypatch.setenv("BATON_RESCAN_JITTER_SECONDS", "0")
    openkat = Settings().openkat
    assert (openkat.katalogus_poll_seconds, openkat.rescan_interval_seconds, openkat.rescan_jitter_seconds) == (
        5,
        2.5,
        0,
    )


def test_a_url_loses_its_trailing_slash_and_must_be_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KATALOGUS_API", "http://katalogus:8000/")
    assert Settings().openkat.katalogus_url == "http://katalogus:8000"
    monkeypatch.setenv("KATALOGUS_API", "katalogus:8000")
    with pytest.raises(ValidationError, match="katalogus_url"):
        Settings()


def test_bytes_without_credentials_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BYTES_API", "http://bytes:8000")
    with pytest.raises(ValidationError, match="BATON_BYTES_USERNAME"):
        Settings()


def test_clients_are_made_for_the_services_configured_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert connect(Settings().openkat) == OpenKatClients()  # today's embedded behaviour: nothing outside

    openkat_env(monkeypatch)
    monkeypatch.setenv("BATON_OPENKAT_RETRIES", "1")
    clients = connect(Settings().openkat)
    try:
        assert clients.katalogus is not None and clients.katalogus.http.base_url == "http://katalogus:8000"
        assert clients.octopoes is not None and clients.octopoes.http.base_url == "http://octopoes_api:80"
        assert clients.bytes is not None and clients.bytes.http.base_url == "http://bytes:8000"
        assert clients.katalogus.http.retry.retries == 1
        assert clients.outages() == []
    finally:
        clients.close()

    monkeypatch.delenv("OCTOPOES_API")
    monkeypatch.delenv("BYTES_API")
    partial = connect(Settings().openkat)
    assert (partial.katalogus is not None, partial.octopoes, partial.bytes) == (True, None, None)
    partial.close()
