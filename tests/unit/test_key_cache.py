"""A gateway checks a key on every request from rows it keeps in memory: a revocation,
rotation or new key is still seen on the very next request, whether it was made through
this Service, by another connection of this process, or by another process."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hutch.config import Settings
from hutch.errors import UnauthorizedError
from hutch.service import Service
from hutch.store import Store


@pytest.fixture
def service(tmp_path: Path) -> Service:
    return Service(Settings.load(home=tmp_path / "home"))


def test_the_rows_are_kept_between_requests(service: Service) -> None:
    made = service.keys.create("alice")
    first = service.keys.authenticate(made["key"])
    assert service.keys.authenticate(made["key"]) is first  # nothing read or built again
    assert service.store.keys.get(made["id"]) is service.store.keys.get(made["id"])


def test_a_revocation_by_this_service_is_seen_at_once(service: Service) -> None:
    made = service.keys.create("alice")
    service.keys.authenticate(made["key"])
    service.keys.revoke("alice")
    with pytest.raises(UnauthorizedError, match="revoked"):
        service.keys.authenticate(made["key"])


def test_a_rotation_is_seen_at_once(service: Service) -> None:
    made = service.keys.create("alice")
    service.keys.authenticate(made["key"])
    new = service.keys.rotate("alice")["key"]
    with pytest.raises(UnauthorizedError, match="unknown API key"):
        service.keys.authenticate(made["key"])
    assert service.keys.authenticate(new).name == "alice"


def test_a_revocation_by_another_process_or_thread_is_seen_at_once(service: Service) -> None:
    made = service.keys.create("alice")
    service.keys.authenticate(made["key"])
    other = Store(service.settings.home / "hutch.db")  # another connection: as another process would
    other.keys.revoke(made["id"], 1.0)
    with pytest.raises(UnauthorizedError, match="revoked"):
        service.keys.authenticate(made["key"])

    bob = service.keys.create("bob")
    service.keys.authenticate(bob["key"])
    done = threading.Thread(target=lambda: service.store.keys.revoke(bob["id"], 2.0))  # this store, another thread's connection
    done.start()
    done.join()
    with pytest.raises(UnauthorizedError, match="revoked"):
        service.keys.authenticate(bob["key"])


def test_an_expiry_needs_no_change_of_the_row(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    made = service.keys.create("alice", ttl=60)
    service.keys.authenticate(made["key"])
    later = time.time() + 120
    monkeypatch.setattr(time, "time", lambda: later)
    with pytest.raises(UnauthorizedError, match="expired"):
        service.keys.authenticate(made["key"])
