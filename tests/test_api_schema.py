"""Property-based requests against the service's own OpenAPI schema (schemathesis,
bounded examples): valid and invalid input alike never makes the service answer 5xx,
and what it answers conforms to what it documents."""

from __future__ import annotations

import os
import tempfile

import schemathesis
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from cachewatch.store import engine as enginemod

_STORE = "sqlite:///" + os.path.join(tempfile.mkdtemp(prefix="cachewatch-schema-"), "store.db")
enginemod.upgrade(_STORE)
app = create_app(ServerSettings(store=_STORE, write_token=None, read_token=None, max_batch_events=50))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_service_keeps_to_its_schema(case):
    case.call_and_validate(checks=[not_a_server_error, response_schema_conformance, content_type_conformance])
