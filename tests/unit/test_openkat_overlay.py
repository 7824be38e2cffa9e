"""deploy/openkat/docker-compose.baton.yml merged onto OpenKAT's own docker-compose.yml (a copy in
tests/data/openkat/, with the upstream commit in its README), by compose's merge rules for the keys the
overlay uses: the `scheduler` service runs Baton's image with OpenKAT's environment read as Baton's
settings, and every other service, network and volume of OpenKAT is what OpenKAT defines.

`podman-compose ... config` (1.6) merges it the same way; docs/openkat.md says how to check."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.core.settings import OPENKAT_SERVICE_NAMES, Settings

ROOT = Path(__file__).resolve().parents[2]
OPENKAT = ROOT / "tests" / "data" / "openkat"
OVERLAY = ROOT / "deploy" / "openkat" / "docker-compose.baton.yml"
OPENKAT_NAMES = [*OPENKAT_SERVICE_NAMES.values(), "QUEUE_URI", "SCHEDULER_DB_URI"]


# --- compose's merge rules (compose-spec, merge.md), for the keys the overlay uses -------------------


def environment(value: dict[str, Any] | list[str] | None) -> dict[str, str | None]:
    if isinstance(value, list):
        return {item.partition("=")[0]: item.partition("=")[2] if "=" in item else None for item in value}
    return {key: None if item is None else str(item) for key, item in (value or {}).items()}


def depends_on(value: dict[str, Any] | list[str] | None) -> dict[str, dict[str, Any]]:
    if isinstance(value, list):
        return {name: {"condition": "service_started"} for name in value}
    return dict(value or {})


def unique(base: list[Any], added: list[Any]) -> list[Any]:
    return base + [item for item in added if item not in base]


def volume_target(volume: str | dict[str, Any]) -> str:
    return volume["target"] if isinstance(volume, dict) else volume.split(":")[1]


def merge_mapping(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_mapping(merged[key], value)
        elif isinstance(value, list):
            raise AssertionError(f"no merge rule here for the sequence {key!r}")
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def merge_service(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if key in ("command", "entrypoint", "image"):  # replaced
            merged[key] = copy.deepcopy(value)
        elif key in ("environment", "labels"):  # merged by name, the override's value wins
            merged[key] = {**environment(base.get(key)), **environment(value)}
        elif key == "depends_on":  # merged by service
            merged[key] = {**depends_on(base.get(key)), **depends_on(value)}
        elif key in ("ports", "env_file", "networks"):  # appended, without duplicates
            merged[key] = unique(base.get(key, []), value)
        elif key == "volumes":  # merged by the mount's target
            kept = [volume for volume in base.get(key, []) if volume_target(volume) not in map(volume_target, value)]
            merged[key] = kept + value
        elif key == "healthcheck":  # a mapping whose `test` is replaced
            merged[key] = {**base.get(key, {}), **value}
        elif key == "build":
            merged[key] = merge_mapping(base.get(key, {}), value)
        elif isinstance(value, (dict, list)):
            raise AssertionError(f"no merge rule here for {key!r}")
        else:
            merged[key] = value
    return merged


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for name, service in override.get("services", {}).items():
        merged["services"][name] = merge_service(base["services"].get(name, {}), service)
    for key in override.keys() - {"services"}:
        merged[key] = merge_mapping(base.get(key, {}), override[key])
    return merged


VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, variables: dict[str, str]) -> str:
    """`${NAME}`, `${NAME:-default}`, `${NAME:?message}`, as compose reads them."""

    def value(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        found = variables.get(name)
        if (operator == ":-" and not found) or (operator == "-" and name not in variables):
            return argument
        if operator and operator.endswith("?") and not found:
            raise AssertionError(f"{name} must be set: {argument}")
        return found or ""

    return VARIABLE.sub(value, text)


def env_file(path: Path, variables: dict[str, str]) -> dict[str, str]:
    """An env file as compose reads it (later lines may use earlier values); `{%...}` placeholders, which
    OpenKAT's `make env` fills in, become a value per name."""
    read: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        value = re.sub(r"\{%(\w+)\}", lambda match: f"made-{match.group(1).lower()}", value.strip().strip('"'))
        read[name] = interpolate(value, {**variables, **read})
    return read


# --- the merged file -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openkat() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((OPENKAT / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def overlay() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(OVERLAY.read_text())
    return loaded


@pytest.fixture(scope="module")
def merged(openkat: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    return merge(openkat, overlay)


def test_the_overlay_replaces_only_the_scheduler(
    openkat: dict[str, Any], overlay: dict[str, Any], merged: dict[str, Any]
) -> None:
    assert list(overlay["services"]) == ["scheduler-import", "scheduler"]
    assert overlay.keys() == {"services"}
    assert "scheduler-import" not in openkat["services"]
    assert merged["services"].keys() == openkat["services"].keys() | {"scheduler-import"}
    for name, service in openkat["services"].items():
        if name != "scheduler":
            assert merged["services"][name] == service, name
    for key in openkat.keys() - {"services"}:
        assert merged[key] == openkat[key], key


def test_the_scheduler_is_built_from_batons_image_and_runs_baton(merged: dict[str, Any]) -> None:
    scheduler = merged["services"]["scheduler"]
    build = scheduler["build"]
    assert interpolate(build["context"], {}) == "../baton"  # Baton's checkout beside OpenKAT's (BATON_SOURCE)
    assert interpolate(build["context"], {"BATON_SOURCE": "/src/baton"}) == "/src/baton"
    assert build["dockerfile"] == "Dockerfile"
    # OpenKAT builds mula's `dev` stage: Baton's Dockerfile names its image's stage, the last one.
    stages = re.findall(r"^FROM\s+\S+(?:\s+AS\s+(\w+))?", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert build["target"] == "runtime" == stages[-1]
    assert build["args"] == {"ENVIRONMENT": "dev"}  # OpenKAT's, merged in; Baton's Dockerfile declares it
    assert re.search(r"^ARG ENVIRONMENT$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert interpolate(scheduler["image"], {}) == "localhost/baton:openkat"
    assert scheduler["command"] == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert scheduler["healthcheck"]["test"] == "baton probe api"
    # Where OpenKAT's clients look for their scheduler, and the host port OpenKAT publishes.
    defaults = env_file(OPENKAT / ".env-defaults", {})
    assert defaults["SCHEDULER_API"] == "http://scheduler:8000"
    assert scheduler["ports"] == ["127.0.0.1:8004:8000"]
    assert set(depends_on(scheduler["depends_on"])) >= {"postgres", "rabbitmq", "katalogus", "octopoes_api", "bytes"}
    assert scheduler["restart"] == "unless-stopped"


def test_openkats_environment_configures_baton(merged: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """What the container's environment holds (OpenKAT's env files, then the service's `environment`) read
    by Baton's settings: OpenKAT's names reach Baton's database, RabbitMQ, KATalogus, Octopoes and Bytes."""
    scheduler = merged["services"]["scheduler"]
    assert scheduler["env_file"] == [".env-defaults", ".env"]
    dot_env = env_file(OPENKAT / ".env-dist", {})  # `make env` makes .env from .env-dist
    container = env_file(OPENKAT / ".env-defaults", {})
    container.update(dot_env)
    for name, value in scheduler["environment"].items():
        container[name] = interpolate(value, dot_env)
    for name in list(os.environ):
        if name.startswith("BATON_") or name in OPENKAT_NAMES:
            monkeypatch.delenv(name)
    for name, value in container.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.database_url == (
        "postgresql+psycopg://scheduler_app:made-scheduler_db_password@postgres:5432/scheduler"
    )
    assert settings.amqp.enabled
    assert settings.amqp.url == "amqp://made-queue_username:made-queue_password@rabbitmq:5672/kat"
    openkat = settings.openkat
    assert (openkat.katalogus_url, openkat.octopoes_url, openkat.bytes_url) == (
        "http://katalogus:8000",
        "http://octopoes_api:80",
        "http://bytes:8000",
    )
    assert openkat.bytes_username == "made-bytes_username"
    assert openkat.bytes_password is not None and openkat.bytes_password.get_secret_value() == "made-bytes_password"
    assert not settings.auth_required  # OpenKAT's clients send no token
    assert settings.recovery.task_timeout_seconds == 1800
    assert not settings.recovery.requeue_running_tasks  # a long scan is never handed out twice
    assert settings.log_json is False


def container_settings(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Baton's settings as a container of `service` reads them (OpenKAT's env files, then `environment`)."""
    dot_env = env_file(OPENKAT / ".env-dist", {})
    container = env_file(OPENKAT / ".env-defaults", {})
    container.update(dot_env)
    for name, value in service["environment"].items():
        container[name] = interpolate(value, dot_env)
    for name in list(os.environ):
        if name.startswith("BATON_") or name in OPENKAT_NAMES:
            monkeypatch.delenv(name)
    for name, value in container.items():
        monkeypatch.setenv(name, value)
    return Settings()


def test_mulas_state_is_taken_over_once_before_baton_starts(
    merged: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-shot `baton import-mula --if-present` on the scheduler database, mula's tables read from
    `public`, Baton's written to schema `baton`, where Baton then runs: Baton starts only once it succeeded."""
    importer, scheduler = merged["services"]["scheduler-import"], merged["services"]["scheduler"]
    assert importer["command"] == ["import-mula", "--if-present"]  # mula's URL: SCHEDULER_DB_URI, the default
    assert importer["image"] == scheduler["image"] and importer["build"] == {
        key: value for key, value in scheduler["build"].items() if key != "args"
    }
    assert importer["env_file"] == scheduler["env_file"] and importer["restart"] == "no"
    assert depends_on(importer["depends_on"]) == {"postgres": {"condition": "service_healthy"}}
    assert depends_on(scheduler["depends_on"])["scheduler-import"] == {"condition": "service_completed_successfully"}
    imports = container_settings(importer, monkeypatch)
    mula_url = os.environ["SCHEDULER_DB_URI"]  # what the argument defaults to in the container
    serves = container_settings(scheduler, monkeypatch)
    assert imports.database_url == serves.database_url == "postgresql+psycopg://" + mula_url.split("://", 1)[1]
    assert imports.database_schema == serves.database_schema == "baton"
    # Where Baton already ran with its tables in `public`: BATON_DATABASE_SCHEMA= (empty) in .env keeps them.
    kept = {**importer, "environment": dict(importer["environment"])}
    kept["environment"]["BATON_DATABASE_SCHEMA"] = interpolate(
        importer["environment"]["BATON_DATABASE_SCHEMA"], {"BATON_DATABASE_SCHEMA": ""}
    )
    assert container_settings(kept, monkeypatch).database_schema is None
