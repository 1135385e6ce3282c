"""Fixtures for the fast unit tests: an in-process Service on the fake provider."""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from hutch.config import Settings
from hutch.server.app import create_app
from hutch.service import Service

with warnings.catch_warnings():
    # starlette warns that its TestClient still uses httpx; irrelevant here.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No HUTCH_* variable of the developer's shell leaks into a test."""
    for key in list(os.environ):
        if key.startswith("HUTCH_"):
            monkeypatch.delenv(key)
    return monkeypatch


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def settings(clean_env: pytest.MonkeyPatch, home: Path) -> Settings:
    return Settings.load(home=home, provider="fake")


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    svc = Service(settings)
    yield svc
    asyncio.run(svc.close())


@pytest.fixture
def app_client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as client:
        yield client
