"""Hints that suggest the right fix: a body that does not parse is not blamed on an old
daemon; a network option on a provider without egress policies names the options given."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hutch.errors import InvalidError
from hutch.models import SandboxSpec
from hutch.netpolicy import NetworkPolicy
from hutch.service import Service


def test_a_body_that_does_not_parse_is_not_blamed_on_an_old_daemon(app_client: Any) -> None:
    deep = b"[" * 100000 + b"]" * 100000  # valid JSON too deep to parse
    r = app_client.post("/v1/sandboxes", content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["kind"] == "invalid"
    assert "older" not in err["hint"] and "openapi" in err["hint"]
    assert app_client.get("/v1/sandboxes").json() == []  # nothing was made


def test_an_unknown_route_still_points_at_an_old_daemon(app_client: Any) -> None:
    r = app_client.get("/v1/no-such-route")
    assert r.status_code == 404 and "older than this client" in r.json()["error"]["hint"]


@pytest.mark.parametrize(
    ("policy", "drop"),
    [
        ({"mode": "allowlist", "allow_hosts": ["example.com"]}, "drop --allow-host,"),
        ({"mode": "allowlist", "allow_hosts": ["example.com"], "ports": [8443]}, "drop --allow-host and --allow-port,"),
        ({"mode": "open"}, "drop --network open,"),
    ],
)
def test_network_options_on_a_provider_without_egress_name_what_was_given(
    service: Service, policy: dict[str, Any], drop: str
) -> None:
    spec = SandboxSpec(provider="fake", network=NetworkPolicy(**policy))
    with pytest.raises(InvalidError) as err:
        asyncio.run(service.create(spec))
    assert "no egress policies" in err.value.message
    assert (err.value.hint or "").startswith(drop), err.value.hint
    if "allow_hosts" in policy:
        assert "--network" not in (err.value.hint or "")  # --allow-host was given, not --network
    assert service.list(include_all=True) == []  # refused before anything was made
