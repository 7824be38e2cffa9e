"""BATON_DATABASE_URL read into one libpq connection string; what cannot work is refused naming the part."""

from __future__ import annotations

import pytest

from baton.core.errors import ConfigurationError
from baton.storage.urls import database_address

PG_AUTOCTL = "postgres://baton@10.0.0.1:6001,10.0.0.2:6002/baton?target_session_attrs=read-write&sslmode=prefer"
TWO_HOSTS = {"user": "baton", "dbname": "baton", "host": "10.0.0.1,10.0.0.2", "port": "6001,6002"}


@pytest.mark.parametrize(
    ("url", "params"),
    [
        (PG_AUTOCTL, {**TWO_HOSTS, "sslmode": "prefer", "target_session_attrs": "read-write"}),
        ("postgresql+psycopg://baton@/baton?host=10.0.0.1:6001&host=10.0.0.2:6002", TWO_HOSTS),
        ("postgresql://baton@/baton?host=10.0.0.1,10.0.0.2&port=6001,6002", TWO_HOSTS),
        ("host=10.0.0.1,10.0.0.2 port=6001,6002 user=baton dbname=baton", TWO_HOSTS),
        # SQLAlchemy's spelling with one port left out, an IPv6 address and a socket directory.
        (
            "postgresql://u@/d?host=[::1]:6001&host=/run/pg&host=h",
            {"user": "u", "dbname": "d", "host": "::1,/run/pg,h", "port": "6001,,"},
        ),
        (
            "postgresql://u:p%40ss@h/d?options=-c%20search_path%3Dx",
            {"user": "u", "password": "p@ss", "dbname": "d", "host": "h", "options": "-c search_path=x"},
        ),
        ("postgresql://", {}),  # everything from PG* variables
    ],
)
def test_every_form_gives_libpq_one_connection_string(url: str, params: dict[str, str]) -> None:
    address = database_address(url)
    assert address.backend == "postgresql"
    assert address.params == params


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://h1:6001,h2:abc/baton", "port 'abc' is not a port number"),
        ("postgresql://u@/d?host=a,b,c&port=1,2", "3 hosts but 2 ports"),
        ("postgresql://u@/d?host=a:1&port=2", "not both"),
        ("postgresql://h/d?sslmode=maybe", "sslmode 'maybe'"),
        ("postgresql://h/d?target_session_attrs=writable", "target_session_attrs 'writable'"),
        ("postgresql://h/d?connect_timeout=soon", "connect_timeout 'soon'"),
        ("postgresql://h/d?colour=blue", 'invalid URI query parameter: "colour"'),
        ("host=h colour=blue", 'invalid connection option "colour"'),
        ("mysql://h/d", "unsupported scheme 'mysql'"),
    ],
)
def test_a_url_that_cannot_work_is_refused_naming_the_part(url: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        database_address(url)
    message = str(refused.value)
    assert message.startswith("BATON_DATABASE_URL: ") and named in message and "\n" not in message


def test_a_refusal_never_shows_the_password() -> None:
    with pytest.raises(ConfigurationError) as refused:
        database_address("postgresql://baton:s3cret@h1:1,h2:x/baton")
    assert "s3cret" not in str(refused.value)


def test_the_description_names_every_host_and_fills_in_pg_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert database_address(PG_AUTOCTL).describe() == "PostgreSQL at 10.0.0.1:6001,10.0.0.2:6002/baton"
    assert database_address("postgresql://u@/d?host=a,b&port=7").describe() == "PostgreSQL at a:7,b:7/d"
    monkeypatch.setenv("PGHOST", "db.internal")
    monkeypatch.setenv("PGDATABASE", "scans")
    monkeypatch.delenv("PGPORT", raising=False)
    assert database_address("postgresql://").describe() == "PostgreSQL at db.internal:5432/scans"
    assert database_address("sqlite:///var/baton.db").describe() == "SQLite at var/baton.db"


def test_baton_options_come_on_top_of_the_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    assert database_address("postgresql://h/d?options=-c%20a%3D1").options_with("-c b=2") == "-c a=1 -c b=2"
    monkeypatch.setenv("PGOPTIONS", "-c env=1")
    assert database_address("postgresql://h/d").options_with("-c b=2") == "-c env=1 -c b=2"


def test_a_schema_is_the_only_one_on_every_connections_search_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """BATON_DATABASE_SCHEMA: one server option of the one connection string, after the user's own."""
    for name in ("PGOPTIONS", "PGPORT", "PGHOST"):
        monkeypatch.delenv(name, raising=False)
    address = database_address("postgresql://u@h/d", "baton")
    assert address.params["options"] == "-c search_path=baton" and address.schema == "baton"
    assert address.describe() == "PostgreSQL at h:5432/d (schema baton)"
    given = database_address("postgresql://u@h/d?options=-c%20statement_timeout%3D5s", "baton")
    assert given.params["options"] == "-c statement_timeout=5s -c search_path=baton"
    assert given.options_with("-c x=1") == "-c statement_timeout=5s -c search_path=baton -c x=1"
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=1s")
    from_environment = database_address("postgresql://u@h/other", "baton")  # PGOPTIONS, kept where Baton sets options
    assert from_environment.params["options"] == "-c lock_timeout=1s -c search_path=baton"
    assert database_address("postgresql://u@h/d").schema is None


def test_a_schema_on_sqlite_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"BATON_DATABASE_SCHEMA \(baton\) is for PostgreSQL"):
        database_address("sqlite:///baton.db", "baton")


@pytest.mark.parametrize("name", ["Baton", "baton-1", "1baton", "a" * 64, "baton; DROP"])
def test_a_schema_name_that_would_need_quoting_is_refused(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from baton.cli.errors import settings_error
    from baton.core.settings import Settings

    monkeypatch.setenv("BATON_DATABASE_SCHEMA", name)
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert str(settings_error(refused.value)).startswith("BATON_DATABASE_SCHEMA: a schema name")
    monkeypatch.setenv("BATON_DATABASE_SCHEMA", "baton_2")
    assert Settings().database_schema == "baton_2"
