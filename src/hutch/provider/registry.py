"""Finding providers by name: the built-ins first, then the ``hutch.providers`` entry-point
group (each entry point names a factory taking :class:`~hutch.config.Settings`). A provider
is checked when it is loaded: the core protocol, and each optional protocol it declares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from hutch.errors import InternalError, InvalidError
from hutch.provider.core import Capabilities, Provider
from hutch.provider.require import missing

if TYPE_CHECKING:
    from hutch.config import Settings

BUILTINS: dict[str, str] = {
    "local": "hutch.providers.local:LocalProvider",
    "fake": "hutch.providers.fake:FakeProvider",
    "unikraft": "hutch.providers.unikraft:UnikraftProvider",
    "cluster": "hutch.providers.cluster:ClusterProvider",
}


def _target(target: str) -> Any:
    module, _, attr = target.partition(":")
    return vars(import_module(module))[attr]


def provider_names() -> list[str]:
    names = set(BUILTINS)
    names.update(ep.name for ep in entry_points(group="hutch.providers"))
    return sorted(names)


def _factory(name: str) -> Callable[[Settings], object]:
    if name in BUILTINS:
        factory: Callable[[Settings], object] = _target(BUILTINS[name])
        return factory
    for ep in entry_points(group="hutch.providers"):
        if ep.name == name:
            loaded: Callable[[Settings], object] = ep.load()
            return loaded
    raise InvalidError(f"unknown provider {name!r}", hint=f"available providers: {', '.join(provider_names())}")


def load_provider(name: str, settings: Settings) -> Provider:
    provider = _factory(name)(settings)
    lacks = missing(provider)
    if lacks or not isinstance(provider, Provider):
        raise InternalError(
            f"the {name} provider does not keep its contract: it lacks {', '.join(lacks)}",
            hint="see docs/providers.md (the provider contract); fix or remove the provider",
        )
    return provider


def option_owners(option: str) -> dict[str, str]:
    """The built-in providers that take ``option`` among a spec's provider options, and how a
    user gives it to each (its CLI flag), for messages."""
    owners = {}
    for name, target in BUILTINS.items():
        cls = _target(target)
        caps: Capabilities = cls.capabilities
        if option in caps.options:
            flags: Mapping[str, str] = cls.option_flags
            owners[name] = flags.get(option, option)
    return owners
