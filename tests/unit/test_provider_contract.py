"""The provider contract as types: every built-in provider implements the core protocol and
each optional protocol its capabilities declare; what it does not declare, the helpers
refuse (``invalid`` with a hint); a provider that declares what it lacks is refused when
it loads; the Service reaches providers only through the contract (no getattr, no
provider names). Refusals before any mutation are proven per provider in tests/contract."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import hutch
from hutch import provider as contract
from hutch.config import Settings
from hutch.errors import HutchError, InternalError, InvalidError
from hutch.models import SandboxSpec
from hutch.provider import BUILTINS, PROTOCOLS, Capabilities, Provider, load_provider
from hutch.providers.fake import FakeProvider
from hutch.service import Service

SRC = Path(hutch.__file__).resolve().parent

# each optional protocol's helper (the Service's only way to it)
HELPERS: dict[str, Callable[[Provider], object]] = {
    "network": contract.network_provider,
    "events": contract.event_source,
    "ranged_reads": contract.ranged_reads,
    "options": contract.options_provider,
    "transfer": contract.transfer_provider,
    "workspace": contract.workspace_provider,
    "pause": contract.pause_provider,
    "watch": contract.watching_provider,
    "ssh": contract.ssh_provider,
    "claims": contract.claims_provider,
    "changes": contract.changes_provider,
    "usage": contract.usage_provider,
    "ports": contract.ports_provider,
    "pool": contract.pool_provider,
    "nodes": contract.nodes_provider,
    "exec_users": contract.exec_users_provider,
}


@pytest.fixture(params=sorted(BUILTINS))
def builtin(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Provider]:
    provider = load_provider(request.param, settings)
    yield provider
    asyncio.run(provider.close())


def test_every_capability_flag_that_promises_a_protocol_has_its_helper() -> None:
    flags = {f.name for f in dataclasses.fields(Capabilities)}
    assert set(PROTOCOLS) <= flags
    assert set(HELPERS) == set(PROTOCOLS)
    helpers = {name for name in contract.__all__ if name.endswith(("_provider", "_source", "_reads"))} - {"load_provider"}
    assert helpers == {h.__name__ for h in HELPERS.values()}


def test_builtin_providers_implement_what_they_declare(builtin: Provider) -> None:
    assert isinstance(builtin, Provider), f"{builtin.name} does not implement the core protocol"
    declared = builtin.capabilities.declared()
    for flag, proto in PROTOCOLS.items():
        if flag in declared:
            assert isinstance(builtin, proto), f"{builtin.name} declares {flag} but is no {proto.__name__}"
            assert HELPERS[flag](builtin) is builtin
    assert contract.missing(builtin) == []


def test_exec_takes_one_exec_spec(builtin: Provider) -> None:
    """The run is one value (ExecSpec), not a list of keywords written out per provider."""
    params = inspect.signature(type(builtin).exec).parameters
    assert list(params) == ["self", "rec", "spec"]
    assert params["spec"].annotation in ("ExecSpec", contract.ExecSpec)


def test_what_a_provider_does_not_declare_is_refused_with_a_hint(builtin: Provider) -> None:
    declared = builtin.capabilities.declared()
    for flag, helper in HELPERS.items():
        if flag in declared or (flag == "transfer" and "workspace" in declared):
            continue  # a workspace provider transfers
        with pytest.raises(InvalidError) as err:
            helper(builtin)
        assert builtin.name in err.value.message and err.value.hint, (flag, err.value.message)


def test_the_builtins_declare_what_they_do() -> None:
    """The capabilities table in docs/providers.md, as declared."""
    caps = {name: load_class(name).capabilities.declared() for name in BUILTINS}
    assert caps["local"] >= {"network", "workspace", "pause", "watch", "events", "ranged_reads", "interactive"}
    assert caps["unikraft"] >= {"claims", "transfer", "ssh", "options", "images", "survives_daemon"}
    assert caps["unikraft"].isdisjoint({"workspace", "pause", "network", "interactive", "watch"})
    assert caps["fake"] >= {"workspace", "pause", "watch", "interactive", "secrets"}
    assert "claims" not in caps["fake"] | caps["local"]


def load_class(name: str) -> Any:
    module, _, attr = BUILTINS[name].partition(":")
    return vars(__import__(module, fromlist=[attr]))[attr]


class Undeclared(FakeProvider):
    """A fake that says it can change egress policies, and cannot."""

    name = "undeclared"
    capabilities = dataclasses.replace(FakeProvider.capabilities, network=True)


class NotAProvider:
    name = "broken"
    capabilities = Capabilities()

    def __init__(self, settings: Settings) -> None:
        self.settings = settings


@pytest.mark.parametrize(("cls", "lacks"), [(Undeclared, "NetworkProvider"), (NotAProvider, "core Provider protocol")])
def test_a_provider_that_does_not_keep_its_word_is_refused_when_it_loads(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, cls: type, lacks: str
) -> None:
    monkeypatch.setitem(BUILTINS, cls.name, f"{__name__}:{cls.__name__}")
    with pytest.raises(InternalError) as err:
        load_provider(cls.name, settings)
    assert lacks in err.value.message and "docs/providers.md" in (err.value.hint or "")


def test_undeclared_provider_options_are_refused_before_anything_is_made(service: Service) -> None:
    for options, owner in (({"ssh": "true"}, "unikraft"), ({"metro": "fra"}, "unikraft"), ({"colour": "blue"}, None)):
        with pytest.raises(InvalidError) as err:
            asyncio.run(service.create(SandboxSpec(provider="fake", provider_options=options)))
        assert f"no {next(iter(options))!r} option" in err.value.message
        assert (f"--provider {owner}" in (err.value.hint or "")) == (owner is not None), err.value.hint
        if owner is not None:  # named as the user gave it
            assert {"ssh": "--ssh", "metro": "--unikraft-metro"}[next(iter(options))] in err.value.message
    assert service.list(include_all=True) == []


def test_a_declared_options_value_is_checked_by_the_provider_before_anything_is_made(settings: Settings) -> None:
    svc = Service(settings.replace(provider="unikraft"))
    try:
        with pytest.raises(InvalidError) as err:
            asyncio.run(svc.create(SandboxSpec(provider="unikraft", provider_options={"metro": "mars"})))
        assert "metro" in err.value.message and err.value.hint
        assert svc.list(include_all=True) == [] and svc.store.claims.all() == []
    finally:
        asyncio.run(svc.close())


def calls(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield node.lineno, node.func.id


def test_the_service_and_server_look_for_no_attribute() -> None:
    """The Service (and the server above it) reach providers through the contract: what a
    provider does is in its capabilities, never found with getattr or hasattr."""
    found = [
        f"{path.relative_to(SRC)}:{line} {name}"
        for package in ("service", "server")
        for path in sorted((SRC / package).rglob("*.py"))
        for line, name in calls(path)
        if name in ("getattr", "hasattr")
    ]
    assert found == []


def test_the_service_names_no_provider() -> None:
    """No branch on a provider's name: what differs is declared in capabilities."""
    names = set(BUILTINS)
    found = [
        f"{path.relative_to(SRC)}:{node.lineno} {node.value!r}"
        for path in sorted((SRC / "service").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []


def test_helpers_report_a_declared_but_missing_protocol_as_internal(settings: Settings) -> None:
    """Only a provider changed after it loaded can get here; it is hutch's fault, not the user's."""
    provider = FakeProvider(settings)
    provider.capabilities = dataclasses.replace(provider.capabilities, claims=True)  # type: ignore[misc]
    with pytest.raises(HutchError) as err:
        contract.claims_provider(provider)
    assert err.value.kind == "internal"
