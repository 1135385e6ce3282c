"""Auto mode's key is ``reuse_key``; records and requests that call it ``session`` (its old name) still work."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from hutch.models import SandboxSpec
from hutch.service import Service


def test_the_spec_calls_it_reuse_key_and_reads_the_old_name() -> None:
    assert SandboxSpec(provider="fake", reuse_key="k").reuse_key == "k"
    old = SandboxSpec.model_validate({"provider": "fake", "session": "k"})
    assert old.reuse_key == "k"
    dumped = json.loads(old.model_dump_json())
    assert dumped["reuse_key"] == "k" and "session" not in dumped


def test_a_record_stored_with_session_still_loads_and_is_reused(service: Service, app_client: Any) -> None:
    made = app_client.post("/v1/sessions", json={"provider": "fake", "reuse_key": "k1"}).json()["sandbox"]
    conn = sqlite3.connect(service.settings.db_path)  # as an earlier release stored it
    try:
        (raw,) = conn.execute("SELECT spec FROM sandboxes WHERE id = ?", (made["id"],)).fetchone()
        spec = json.loads(raw)
        spec["session"] = spec.pop("reuse_key")
        conn.execute("UPDATE sandboxes SET spec = ? WHERE id = ?", (json.dumps(spec), made["id"]))
        conn.commit()
    finally:
        conn.close()
    assert service.get(made["id"]).spec.reuse_key == "k1"
    again = app_client.post("/v1/sessions", json={"provider": "fake", "reuse_key": "k1"}).json()
    assert (again["sandbox"]["id"], again["created"]) == (made["id"], False)


def test_the_api_accepts_the_old_field_name(app_client: Any) -> None:
    first = app_client.post("/v1/sessions", json={"provider": "fake", "session": "k2"}).json()
    assert first["created"] and first["sandbox"]["spec"]["reuse_key"] == "k2"
    again = app_client.post("/v1/sessions", json={"provider": "fake", "reuse_key": "k2"}).json()
    assert (again["sandbox"]["id"], again["created"]) == (first["sandbox"]["id"], False)


def test_auto_mode_keeps_one_sandbox_per_image() -> None:
    from hutch.cli.run import reuse_key

    plain = reuse_key("local")
    assert reuse_key("local", None) == plain  # the key of a run without --image is unchanged
    assert reuse_key("local", "python:3.12-slim") not in (plain, reuse_key("local", "debian:bookworm"))
