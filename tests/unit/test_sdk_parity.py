"""Sandbox and AsyncSandbox (and their Files) are kept in step; the public surface is pinned."""

from __future__ import annotations

import inspect

import pytest

import hutch
from hutch.sdk import AsyncFiles, AsyncImages, AsyncRun, AsyncRuns, AsyncSandbox, Files, Images, Run, Runs, Sandbox
from hutch.sdk.policy import AsyncPolicy, Policy

TWINS = [
    (Sandbox, AsyncSandbox),
    (Files, AsyncFiles),
    (Run, AsyncRun),
    (Runs, AsyncRuns),
    (Policy, AsyncPolicy),
    (Images, AsyncImages),
]
SYNC_TO_ASYNC_DUNDERS = {"__enter__": "__aenter__", "__exit__": "__aexit__"}


def public_members(cls: type) -> dict[str, object]:
    return {name: value for name, value in inspect.getmembers(cls) if not name.startswith("_")}


def params(func: object) -> list[tuple[str, object, object, object]]:
    sig = inspect.signature(func)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]


def instance_attributes(cls: type) -> set[str]:
    """Attributes set in __init__ (info, client, files ...)."""
    src = inspect.getsource(cls.__init__)
    return {line.split("=")[0].strip().removeprefix("self.") for line in src.splitlines() if line.strip().startswith("self.")}


@pytest.mark.parametrize(("sync_cls", "async_cls"), TWINS)
def test_same_public_members(sync_cls: type, async_cls: type) -> None:
    assert set(public_members(sync_cls)) == set(public_members(async_cls))
    assert instance_attributes(sync_cls) == instance_attributes(async_cls)


@pytest.mark.parametrize(("sync_cls", "async_cls"), TWINS)
def test_same_signatures(sync_cls: type, async_cls: type) -> None:
    for name, member in public_members(sync_cls).items():
        twin = getattr(async_cls, name)
        if isinstance(member, property):
            assert isinstance(twin, property), name
            continue
        assert callable(member), name
        assert params(member) == params(twin), name


@pytest.mark.parametrize(("sync_cls", "async_cls"), TWINS)
def test_async_twin_is_awaitable_and_sync_is_not(sync_cls: type, async_cls: type) -> None:
    for name, member in public_members(sync_cls).items():
        if isinstance(member, property):
            continue
        assert not inspect.iscoroutinefunction(member), name
        twin = getattr(async_cls, name)
        assert inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin), name


def test_same_constructor_shape() -> None:
    assert [p[0] for p in params(Sandbox.__init__)] == [p[0] for p in params(AsyncSandbox.__init__)]
    assert [p[0] for p in params(Files.__init__)] == [p[0] for p in params(AsyncFiles.__init__)]
    assert params(Images.__init__) == params(AsyncImages.__init__)


@pytest.mark.parametrize(("sync_cls", "async_cls"), [(Sandbox, AsyncSandbox), (Images, AsyncImages)])
def test_context_managers(sync_cls: type, async_cls: type) -> None:
    for sync_name, async_name in SYNC_TO_ASYNC_DUNDERS.items():
        assert hasattr(sync_cls, sync_name)
        assert inspect.iscoroutinefunction(getattr(async_cls, async_name))
        assert [p[0] for p in params(getattr(sync_cls, sync_name))] == [p[0] for p in params(getattr(async_cls, async_name))]


def test_exec_never_takes_check_or_raise_flags() -> None:
    # a non-zero exit of the workload never raises: there is nothing to switch on
    assert not {"check", "raise_on_error"} & set(inspect.signature(Sandbox.exec).parameters)


# -- the public surface ---------------------------------------------------------------

PINNED_ALL = [
    "AsyncImages",
    "AsyncPty",
    "AsyncRun",
    "AsyncSandbox",
    "ExecResult",
    "FileInfo",
    "HutchError",
    "Images",
    "OutputChunk",
    "Pty",
    "Run",
    "Sandbox",
    "__version__",
]


def test_all_is_sorted() -> None:
    assert list(hutch.__all__) == sorted(hutch.__all__)
    assert len(set(hutch.__all__)) == len(hutch.__all__)


def test_all_is_pinned() -> None:
    assert list(hutch.__all__) == PINNED_ALL


def test_all_names_exist() -> None:
    for name in hutch.__all__:
        assert hasattr(hutch, name), name
    assert hutch.Sandbox is Sandbox
    assert hutch.AsyncSandbox is AsyncSandbox
    assert isinstance(hutch.__version__, str)
