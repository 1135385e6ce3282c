"""schemathesis over the daemon's OpenAPI, against the in-process app on the fake provider:
no 5xx for anything a client may send, and every answer (status, content type, body) is
what the document says. Bounded and seeded: the same requests on every run.

Each operation gets schema-valid requests (with random references, then with its
``{ref}`` naming a live sandbox) and schema-invalid ones, which must be refused with a
documented 4xx. The check that schema-valid input is accepted is left out: the document
cannot express every rule (names, cross-field checks, a provider's capabilities), and
refusing such input with ``invalid`` is the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from hutch.provider import load_provider
from hutch.server.app import create_app
from hutch.service import Service

SEED = 20261201
EXAMPLES = 5  # per operation and pass: about 650 requests in all
BOX = "box"
schemathesis.serializer.alias("application/x-hutch-push", "application/octet-stream")  # a push body is bytes
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")  # an image import's body


@pytest.fixture
def app(service: Service) -> Any:
    fake = load_provider("fake", service.settings)
    service._providers["fake"] = service._providers["local"] = fake  # a spec's default provider is local
    return create_app(service)


def _run(op: Any, mode: GenerationMode, before: Callable[[], None], **pinned: Any) -> list[str]:
    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(mode, **pinned))
    def check(case: Any) -> None:
        before()
        case.call_and_validate(excluded_checks=[positive_data_acceptance])

    try:
        check()
    except Unsatisfiable:
        return []  # nothing of this kind can be generated for it (no parameters to break)
    except BaseException as exc:  # a failure group (not an Exception): reported whole below
        return [f"{op.label} ({mode.value}{', pinned' if pinned else ''}):\n{exc}"]
    return []


def test_the_api_keeps_its_openapi_document(app: Any) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    client = TestClient(app)

    def ensure_box() -> None:  # a live sandbox for the pinned pass (an example may destroy or pause it)
        resp = client.get(f"/v1/sandboxes/{BOX}")
        if resp.status_code == 200 and resp.json()["state"] == "paused":
            client.post(f"/v1/sandboxes/{BOX}/resume")
        elif resp.status_code != 200 or resp.json()["state"] != "running":
            assert client.post("/v1/sandboxes", json={"provider": "fake", "name": BOX}).status_code == 201

    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 40
    for op in operations:
        if op.path == "/v1/images/pull":
            continue  # it would reach registries outside this machine: tests/integration/test_images.py
        # this app is no cluster's front door: a valid request to a cluster route answers 503
        # unavailable by design (tests/unit/test_cluster_placement.py); invalid ones are still 4xx
        modes = (GenerationMode.NEGATIVE,) if op.path.startswith("/v1/cluster") else tuple(GenerationMode)
        for mode in modes:
            failures += _run(op, mode, lambda: None)
        if "{ref}" in op.path:
            failures += _run(op, GenerationMode.POSITIVE, ensure_box, path_parameters={"ref": BOX})
    assert not failures, "\n\n".join(failures)
