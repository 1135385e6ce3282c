"""Fixtures shared by the image tests: a busybox root filesystem built once per session, imported per daemon."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon
from tests.integration.image_roots import busybox_root, shared_dir

from hutch.client.images import follow


@pytest.fixture(scope="session")
def busybox_dir() -> Iterator[Path]:
    base = shared_dir("hutch-busybox-")
    try:
        yield busybox_root(base / "busybox")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def bb(daemon: Daemon, busybox_dir: Path) -> str:
    """``bb:1``: the busybox root imported into the test's daemon."""
    with daemon.client() as c:
        follow(c.image_import(f"rootfs:{busybox_dir}", "bb:1"))
    return "bb:1"
