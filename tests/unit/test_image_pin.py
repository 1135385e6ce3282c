"""The image a key's sandbox starts from is the one the Service admitted, by id: were the key's
name removed between the admission and the provider's lookup, the provider must not fall back
to another owner's image of the same name (images/source.resolve_image)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from hutch.errors import NotFoundError
from hutch.imageref import parse_registry
from hutch.models import SandboxRecord, SandboxSpec, SandboxState
from hutch.providers.local.images.source import resolve_image
from hutch.providers.local.images.store import ImageStore
from hutch.store import Store


def _image(store: ImageStore, owner: str, name: str, marker: str) -> str:
    image_id = "sha256:" + hashlib.sha256(marker.encode()).hexdigest()
    row = {"id": image_id, "manifest_digest": image_id, "manifest": {}, "config": {"config": {"Env": [f"WHO={marker}"]}},
           "layers": [], "size": 0, "platform": "linux/amd64", "source": "import rootfs"}  # fmt: skip
    store.rows.put(row, [parse_registry(name).name], owner)  # names are stored in full (docker.io/...)
    store.rootfs_path(image_id).mkdir(parents=True)
    return image_id


def _rec(owner: str, image: str, data: dict[str, Any]) -> SandboxRecord:
    now = time.time()
    return SandboxRecord(id="sbx_pin", provider="local", state=SandboxState.creating, spec=SandboxSpec(image=image),
                         created_at=now, updated_at=now, last_active_at=now, owner=owner, data=data)  # fmt: skip


def test_a_pinned_image_is_started_by_id_never_another_owners_of_that_name(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images", Store(tmp_path / "db.sqlite").images)
    alices = _image(store, "key_alice", "team/app:1", "alice")
    bobs = _image(store, "key_bob", "team/app:1", "bob")

    got = resolve_image(store, _rec("key_bob", "team/app:1", {"image_pin": bobs}))
    assert got.id == bobs and got.ref == "team/app:1"

    # bob's name and image go after the admission: his sandbox does not start from alice's
    store.rows.untag(parse_registry("team/app:1").name, "key_bob")
    store.rows.delete(bobs)
    with pytest.raises(NotFoundError):
        resolve_image(store, _rec("key_bob", "team/app:1", {"image_pin": bobs}))
    # what the provider did before the pin: the name, any owner's
    assert resolve_image(store, _rec("key_bob", "team/app:1", {})).id == alices
