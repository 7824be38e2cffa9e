"""BATON_DATABASE_URL, read once into what every connection Baton opens uses.

On PostgreSQL every connection goes through libpq (psycopg), whoever opens it: the SQLAlchemy
engines (main and control), the API's psycopg pool, the LISTEN connections of wake-ups and workers.
All take the one libpq connection string made here, so they reach the same hosts, in the same order,
with the same `target_session_attrs`, `sslmode` and `options`. libpq parses the URL itself, so every
form it knows works: several hosts in the netloc (`h1:p1,h2:p2`, what `pg_autoctl show uri` prints),
`?host=h1,h2&port=p1,p2`, a key/value string (`host=h1 port=p1 dbname=baton`), and PG* environment
variables for whatever the URL leaves out. SQLAlchemy's own spelling, `?host=h1:p1&host=h2:p2`, is
rewritten into libpq's first. A URL that cannot work is refused here, naming the part.

BATON_DATABASE_SCHEMA is a server option of that string (`-c search_path=<schema>`, nothing else on the
path), so every connection, whoever opens it, finds Baton's tables, alembic's version table, the
triggers' functions and the statements' unqualified names in that schema and nowhere else: a table of
the same name in `public` (mula's `tasks`) is never seen. LISTEN/NOTIFY channels and advisory locks are
the database's, not a schema's: one Baton per database (mula uses neither).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Literal
from urllib.parse import parse_qsl, quote, urlencode

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from baton.core.errors import ConfigurationError

SETTING = "BATON_DATABASE_URL"
POSTGRESQL_SCHEMES = ("postgresql+psycopg", "postgresql", "postgres")
DEFAULT_PORT = "5432"
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
# One entry of SQLAlchemy's `?host=` list: a name, an IPv4 address or a bracketed IPv6 one, a colon
# and a port (a Unix socket directory, which starts with '/', has none).
_HOST_AND_PORT = re.compile(r"^(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>[^:]*)$")


def refused(problem: str) -> ConfigurationError:
    return ConfigurationError(f"{SETTING}: {problem}")


@dataclass(frozen=True)
class DatabaseAddress:
    """Which database, and how to reach it."""

    backend: Literal["sqlite", "postgresql"]
    url: str  # as configured
    conninfo: str = ""  # PostgreSQL: the libpq connection string every connection uses
    schema: str | None = None  # PostgreSQL: BATON_DATABASE_SCHEMA, the only schema on the search path

    @property
    def params(self) -> dict[str, str]:
        """The connection string's parameters (what the URL gave; libpq adds PG* variables)."""
        return _parameters(self.conninfo) if self.conninfo else {}

    def conninfo_with(self, **changes: str) -> str:
        """The connection string with some parameters changed (another `dbname`, say)."""
        return make_conninfo(self.conninfo, **changes)

    def options_with(self, extra: str) -> str:
        """The server `options` the URL (or PGOPTIONS) gives, plus Baton's own: a connection that
        sets `options` itself would otherwise drop the user's."""
        given = self.params.get("options") or os.environ.get("PGOPTIONS", "")
        return f"{given} {extra}".strip()

    def describe(self) -> str:
        """`PostgreSQL at h1:p1,h2:p2/db` (with PG* variables filled in), or `SQLite at path`."""
        if self.backend == "sqlite":
            try:
                return f"SQLite at {make_url(self.url).database or ':memory:'}"
            except ArgumentError:
                return "SQLite"
        params = self.params
        hosts = (params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost").split(",")
        ports = (params.get("port") or os.environ.get("PGPORT") or DEFAULT_PORT).split(",")
        if len(ports) == 1:
            ports *= len(hosts)
        places = ",".join(
            f"{f'[{host}]' if ':' in host else host}:{port or DEFAULT_PORT}"
            for host, port in zip(hosts, ports, strict=False)
        )
        database = params.get("dbname") or os.environ.get("PGDATABASE")
        described = f"PostgreSQL at {places}" + (f"/{database}" if database else "")
        return described + (f" (schema {self.schema})" if self.schema else "")


@cache
def database_address(url: str, schema: str | None = None) -> DatabaseAddress:
    """Parse BATON_DATABASE_URL (with BATON_DATABASE_SCHEMA); a ConfigurationError names the part that
    cannot work."""
    scheme, separator, _ = url.partition("://")
    if separator and (scheme == "sqlite" or scheme.startswith("sqlite+")):
        if schema:
            raise ConfigurationError(
                f"BATON_DATABASE_SCHEMA ({schema}) is for PostgreSQL; the database is SQLite: unset it, or point "
                "BATON_DATABASE_URL at PostgreSQL"
            )
        return DatabaseAddress("sqlite", url)
    if separator and scheme not in POSTGRESQL_SCHEMES:
        raise refused(f"unsupported scheme '{scheme}'; use sqlite:///path/baton.db or postgresql://user@host:port/db")
    try:
        params = _parameters(_libpq_uri(url) if separator else url)
    except ProgrammingError as exc:  # libpq's own words: 'invalid URI query parameter: "foo"', ...
        raise refused(str(exc).strip()) from exc
    _check(params)
    if schema:
        given = params.get("options") or os.environ.get("PGOPTIONS", "")
        params["options"] = f"{given} -c search_path={schema}".strip()
    return DatabaseAddress("postgresql", url, make_conninfo(**params), schema)


def libpq_conninfo(url: str, schema: str | None = None, **changes: str) -> str:
    """The libpq connection string of a PostgreSQL URL, for a connection of one's own; with
    `changes` (`dbname="other"`), another database on the same servers. Baton takes it as a URL too."""
    address = database_address(url, schema)
    return address.conninfo_with(**changes) if changes else address.conninfo


def _parameters(conninfo: str) -> dict[str, str]:
    return {key: str(value) for key, value in conninfo_to_dict(conninfo).items() if value is not None}


def _libpq_uri(url: str) -> str:
    """The URL with libpq's scheme, and SQLAlchemy's `?host=h1:p1&host=h2:p2` as libpq spells it."""
    rest = url.partition("://")[2]
    base, _, query = rest.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    hosts = [value for key, value in pairs if key == "host"]
    split = [_HOST_AND_PORT.match(host) for host in hosts]
    if len(hosts) < 2 and not any(split):  # libpq's own spelling: leave it as it is
        return f"postgresql://{rest}"
    if any(split) and any(key == "port" for key, _ in pairs):
        raise refused("give ports either as host=name:port or as port=, not both")
    names = [match["host"].strip("[]") if match else host for match, host in zip(split, hosts, strict=True)]
    ports = [match["port"] if match else "" for match in split]
    others = [(key, value) for key, value in pairs if key != "host"]
    joined = [("host", ",".join(names))] + ([("port", ",".join(ports))] if any(ports) else [])
    return f"postgresql://{base}?{urlencode(others + joined, quote_via=quote, safe=',:/')}"


def _check(params: dict[str, str]) -> None:
    """What libpq would refuse only when connecting, refused at start-up instead."""
    hosts = (params.get("host") or params.get("hostaddr") or "").split(",")
    ports = params.get("port", "").split(",")
    for port in ports:
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise refused(f"port '{port}' is not a port number")
    if len(ports) > 1 and len(ports) != len(hosts):
        raise refused(f"{len(hosts)} hosts but {len(ports)} ports; give one port for all hosts or one per host")
    for name, allowed in (("sslmode", SSL_MODES), ("target_session_attrs", SESSION_ATTRS)):
        value = params.get(name)
        if value is not None and value not in allowed:
            raise refused(f"{name} '{value}' is not one of {', '.join(allowed)}")
    timeout = params.get("connect_timeout")
    if timeout is not None and not timeout.lstrip("-").isdigit():
        raise refused(f"connect_timeout '{timeout}' is not a whole number of seconds")
