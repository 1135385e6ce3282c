"""``with Sandbox.create() as s: s.fork(2)`` does not leave the children running: a ``with``
(``async with``) block on a sandbox destroys the forks made from it, unless ``keep=True``.
Against a real daemon on the fake provider."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_cli import daemon_home  # noqa: F401 - the fixture

from hutch import AsyncSandbox, Sandbox
from hutch.client import Client
from hutch.config import Settings


@pytest.fixture
def settings(daemon_home: Path, clean_env: pytest.MonkeyPatch) -> Settings:  # noqa: F811
    return Settings.load(home=daemon_home, provider="fake")


def live(settings: Settings) -> set[str]:
    return {r["id"] for r in Client(settings, autostart=False).list()}


def test_a_with_block_destroys_the_forks_made_in_it(settings: Settings) -> None:
    before = live(settings)
    with Sandbox.create(settings=settings) as sbx:
        kids = sbx.fork(2)
        kept = sbx.fork(1, keep=True)[0]
        assert not isinstance(kept, Exception)
        ids = {k.id for k in kids if isinstance(k, Sandbox)}
        assert len(ids) == 2 and ids | {sbx.id, kept.id} <= live(settings)
        kids[0].destroy()  # one already gone is fine
    try:
        assert live(settings) - before == {kept.id}  # the parent and its forks are gone, the kept one stays
    finally:
        kept.destroy()


def test_without_with_forks_stand_alone(settings: Settings) -> None:
    sbx = Sandbox.create(settings=settings)
    kid = sbx.fork(1)[0]
    assert isinstance(kid, Sandbox)
    sbx.destroy()  # an explicit destroy is of this sandbox only: a fork is not a sub-agent
    try:
        assert kid.id in live(settings)
    finally:
        kid.destroy()


def test_an_async_with_block_destroys_the_forks_made_in_it(settings: Settings) -> None:
    before = live(settings)

    async def main() -> set[str]:
        async with await AsyncSandbox.create(settings=settings) as sbx:
            kids = await sbx.fork(2)
            ids = {k.id for k in kids if isinstance(k, AsyncSandbox)}
            assert len(ids) == 2 and ids <= live(settings)
        return ids

    ids = asyncio.run(main())
    assert len(ids) == 2 and live(settings) == before
