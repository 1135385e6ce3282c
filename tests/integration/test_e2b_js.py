"""E2B's official JS SDK (npm ``e2b``, run by the machine's node), unchanged, against a real
gateway: create, commands (streams, callbacks, env, cwd, exit codes, background), files,
a directory watch (the WatchDir stream), list, kill; and the hutch side of it."""

from __future__ import annotations

from pathlib import Path

from tests.integration.e2b_sdk import js_sdk, run_js
from tests.integration.test_e2b import E2B, e2b  # noqa: F401 - the module fixture: a gateway, keys, the SDK

from hutch.server.e2b.auth import hutch_id

FLOW = Path(__file__).with_name("e2b_js") / "flow.cjs"


def test_the_js_sdk_core_flow(e2b: E2B) -> None:  # noqa: F811
    out = run_js(js_sdk(), e2b.env(e2b.alice["key"]), FLOW)
    assert out["id"].startswith("sbx-")
    assert out["run"] == [0, "hello-js\n", "err\n"]
    assert out["callbacks"] == ["bar\n/tmp\n", "bar\n/tmp\n"]
    assert out["exit"] == [True, 3, "partial\n"]
    assert out["background"] == "later\n"
    assert ["j.txt", "create"] in out["watched"] and ["j.txt", "write"] in out["watched"]  # WatchDir, a stream
    assert out["text"] == "from js" and out["bytes"] == list(b"from js")
    assert ["j.txt", "file", 7] in out["list"]
    assert out["exists"] == [True, False] and out["listed"] is True
    assert out["killed"] is True and out["running"] is False
    rec = e2b.owner().get(hutch_id(out["id"]))
    assert rec["owner"] == e2b.alice["id"] and rec["spec"]["labels"] == {"sdk": "js"} and rec["state"] == "destroyed"
    assert ["/bin/bash", "-l", "-c", "echo hello-js; echo err >&2"] in [r["command"] for r in e2b.owner().runs(rec["id"])]
    assert {"sandbox_created", "run_started", "file_written", "file_read"} <= set(e2b.events(out["id"]))
