"""Schemathesis against the app's own OpenAPI schema, on both backends: no 5xx, every answer JSON and
as documented.

Deterministic in the suite: the hypothesis profile `ci` (tests/conftest.py) derandomizes, so every
run draws the same cases. `bash scripts/fuzz.sh` runs many more examples with random seeds (the
profile `deep`, BATON_FUZZ_EXAMPLES) and writes its counts to docs/fuzzing.md.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance, unsupported_method

from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import seed_catalogue
from baton.runtime import build_app
from baton.service.tokens import Scope, create_token
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from tests.conftest import POSTGRES_URL, fresh_postgres_database
from tests.fuzzing import EXAMPLES, record, write_report

BACKENDS = ["sqlite", "postgresql"] if POSTGRES_URL or os.environ.get("CI") else ["sqlite"]
# One pytest-xdist worker runs them all: the app and schemas per backend (module fixtures) are made once.
pytestmark = pytest.mark.xdist_group("fuzz")

SHADOWED_BY_A_PARAMETER = {"/tasks/stats", "/schedules/search"}
BUSINESS_RULE_PATHS = {
    "/schedulers/{scheduler}/push",
    "/tasks",
    "/schedules",
    "/schedules/search",
    "/schedules/{schedule_id}",
    "/organisations/{org_id}/events",
    "/organisations/{org_id}/report-schedules",
    "/queues/{queue_id}/pop",
    "/schedulers/{scheduler}/pop",
}
# A listing's cursor is opaque: only one the server wrote is valid, which no pattern can say (422).
OPAQUE_CURSORS = {
    "GET /organisations",
    "GET /queues",
    "GET /schedulers",
    "GET /ui/api/overview",
    "GET /ui/api/schedulers",
}


class FuzzTarget:
    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.store = Store(url)
        self.store.migrate()
        with self.store.session() as session:
            seed_catalogue(session, None)
            create_organisation(session, "acme", "Acme", maxsize=100)
            self.token = create_token(session, "fuzzer", [Scope.ADMIN])
        self.authorization = f"Bearer {self.token}"
        self.auth_enforced: set[str] = set()  # operations whose 2xx were refused without the token
        # Authentication on: the schema then declares it, and schemathesis also checks that
        # requests without a valid token are refused.
        # Waits as short as the schema allows: a drawn `wait` on an empty queue is really waited out.
        self.app = build_app(Settings(database_url=url, auth="on", pop_max_wait_seconds=0.01), self.store)

    def check(self, case: schemathesis.Case, *, probe_auth: bool = False) -> Any:
        """Send `case` and check its answer; returns the answer.

        A 2xx sent with the token is sent again without it and with an invalid one (schemathesis'
        ignored_auth check), once per operation as schemathesis' own runner does (it is a property of
        the operation), or every time with `probe_auth`. Cases sent without the token are always
        checked: their 2xx would be a route answering without authentication."""
        # Some refusals of schema-valid bodies are on purpose, so that one check is off there: the
        # compatible push answers 400 when scheduler_id contradicts the path (as OpenKAT's runners
        # expect); a cron expression's validity cannot be written as a JSON-schema pattern; a filter's
        # value must suit its operator (`in` takes a list), which the schema cannot tie; a schedule's
        # or event's data must be the job of its type, and OpenKAT answers 400 for what it refuses.
        refusable = case.operation.path in BUSINESS_RULE_PATHS or case.operation.label in OPAQUE_CURSORS
        excluded = [positive_data_acceptance] if refusable else []
        # OpenKAT's paths put a static segment beside a parameter (/tasks/stats beside /tasks/{task_id},
        # /schedules/search beside /schedules/{schedule_id}): PATCH /tasks/stats reaches the task route
        # and answers 422 ("stats" is not a UUID), not 405, exactly as OpenKAT's scheduler does.
        if case.operation.path in SHADOWED_BY_A_PARAMETER:
            excluded.append(unsupported_method)
        response = case.call()
        with_token = response.request.headers.get("Authorization") == self.authorization
        if with_token and case.operation.label in self.auth_enforced and not probe_auth:
            excluded.append(ignored_auth)
        record(self.backend, case.operation.label, response.status_code)
        assert response.status_code < 500, f"{case.operation.label} answered {response.status_code}: {response.text}"
        if response.status_code >= 400:
            content_type = response.headers.get("content-type") or [""]
            assert content_type[0].startswith("application/json"), response.text
        case.validate_response(response, excluded_checks=excluded)
        if with_token and 200 <= response.status_code < 300:
            self.auth_enforced.add(case.operation.label)
        return response


@pytest.fixture(scope="module", params=BACKENDS)
def target(request: pytest.FixtureRequest) -> Iterator[FuzzTarget]:
    if request.param == "sqlite":
        directory = Path(tempfile.mkdtemp(prefix="baton-fuzz-"))
        fuzz_target = FuzzTarget("sqlite", f"sqlite:///{directory / 'fuzz.db'}")
        yield fuzz_target
        fuzz_target.store.dispose()
        shutil.rmtree(directory, ignore_errors=True)
        return
    with fresh_postgres_database("baton_fuzz") as url:
        fuzz_target = FuzzTarget("postgresql", url)
        yield fuzz_target
        fuzz_target.store.dispose()


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    write_report()


# Text no database can store (NUL, lone surrogates) is refused with a 422 that the schema cannot
# declare; positive cases leave it out, and tests/test_bad_input.py sends it on purpose.
GENERATION = {"allow-x00": False, "codec": "utf-8"}


def schema_for(target: FuzzTarget, **extra: Any) -> Any:
    # The token is schemathesis' authentication for the schema's bearer scheme, not a configured
    # header: a configured header goes in with the headers a case generates, so on an operation with a
    # header parameter of its own (a pop's Idempotency-Key) schemathesis took the valid token for one
    # it had generated, and failed the 200 as "accepts invalid authentication" (issue #44). As its
    # authentication, every 2xx is checked again without the token and with an invalid one (401 or
    # 403 expected), and the cases it generates without a token expect a 401.
    auth = {"openapi": {"HTTPBearer": {"bearer": target.token}}}
    config = SchemathesisConfig.from_dict({"generation": GENERATION, "auth": auth, **extra})
    return schemathesis.openapi.from_asgi("/openapi.json", target.app, config=config)


@pytest.fixture(scope="module")
def api_schema(target: FuzzTarget) -> Any:
    return schema_for(target)


# The operations whose bodies take filter trees, which are recursive (groups nest): schemathesis'
# exhaustive coverage phase spends minutes on each of them (POST /tasks alone 44 s per backend), so
# there only the generated examples run (the filter language has property tests of its own).
FILTER_BODIES = r"^POST (/tasks|/schedules/search|/queues/\{queue_id\}/pop|/schedulers/\{scheduler\}/pop)$"


@pytest.fixture(scope="module")
def filter_body_schema(target: FuzzTarget) -> Any:
    return schema_for(target, phases={"coverage": {"enabled": False}})


api = schemathesis.pytest.from_fixture("api_schema")
filter_bodies = schemathesis.pytest.from_fixture("filter_body_schema")


# One test item runs every operation: its time limit is the whole fuzz run's, not one request's, and
# grows with the examples drawn (a deep run of 300 took 927 s on a 2-core machine at load 25).
FUZZ_SECONDS = max(900, 10 * EXAMPLES)


@pytest.mark.timeout(FUZZ_SECONDS)
@api.exclude(name_regex=FILTER_BODIES).parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: schemathesis.Case, target: FuzzTarget) -> None:
    target.check(case)


@pytest.mark.timeout(FUZZ_SECONDS)
@filter_bodies.include(name_regex=FILTER_BODIES).parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_operations_with_filter_bodies_conform_to_their_schema(case: schemathesis.Case, target: FuzzTarget) -> None:
    target.check(case)


# Requests the deep fuzz (scripts/fuzz.sh) found failing, sent on every run as schemathesis sends
# them, its authentication and checks included: the parts given (the rest generated), the headers
# schemathesis must have generated itself, and the status expected.
class Found(NamedTuple):
    method: str
    path: str
    given: dict[str, Any]
    generated_headers: tuple[str, ...]
    status: int


FOUND_BY_THE_DEEP_FUZZ = {
    # Issue #44: a 500 on PostgreSQL, an OverflowError binding a moment that is in year 0 in UTC.
    "moment-before-year-1-in-utc": Found(
        "GET",
        "/schedules",
        {
            "query": {
                "limit": 413,
                "max_created_at": "2000-01-01",
                "max_deadline_at": "2000-01-01",
                "min_created_at": "2000-01-01",
                "min_deadline_at": "0001-01-01T00:00:00+00:01",
            }
        },
        (),
        422,
    ),
    # Issue #44: "API accepts invalid authentication" for a 200 pop with a generated Idempotency-Key:
    # it carried the valid token, configured as a header, which schemathesis then took for generated.
    "pop-with-a-generated-idempotency-key": Found(
        "POST",
        "/schedulers/{scheduler}/pop",
        {"path_parameters": {"scheduler": "normalizer"}, "query": {"limit": 256, "wait": 0.005}, "body": None},
        ("Idempotency-Key",),
        200,
    ),
}


@pytest.mark.parametrize("found", FOUND_BY_THE_DEEP_FUZZ)
def test_cases_the_deep_fuzz_found(found: str, api_schema: Any, target: FuzzTarget) -> None:
    case_of = FOUND_BY_THE_DEEP_FUZZ[found]
    strategy = api_schema[case_of.path][case_of.method].as_strategy(**case_of.given)
    if case_of.generated_headers:
        strategy = strategy.filter(lambda case: all(name in case.headers for name in case_of.generated_headers))
    responses: list[Any] = []

    @given(case=strategy)
    @settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
    def send(case: schemathesis.Case) -> None:
        responses.append(target.check(case, probe_auth=True))

    send()
    assert [response.status_code for response in responses] == [case_of.status]
    # The token was on the wire: what the authentication check probed without it was this request.
    assert responses[0].request.headers["Authorization"] == target.authorization
