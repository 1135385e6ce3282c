"""``POST /v1/run`` (hutch run as one use-case) on the fake provider: what it makes, keeps and
destroys, the tree in and out, failures on every step, the command's input by credit, and
a client that goes away."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import tarfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hutch.client import transfer
from hutch.errors import UnavailableError
from hutch.server.app import create_app
from hutch.server.oneshot import FRAMED, WINDOW
from hutch.service import Service

RUN = "/v1/run"


def frames(resp: Any) -> list[dict[str, Any]]:
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in resp.text.splitlines() if line]


def types(out: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in out]


def state(app_client: Any, sbx: str) -> str:
    return str(app_client.get(f"/v1/sandboxes/{sbx}").json()["state"])


def framed(req: dict[str, Any], push: bytes = b"") -> bytes:
    head = json.dumps(req | ({"push_size": len(push)} if push else {})).encode()
    return str(len(head)).encode() + b"\n" + head + push


def test_a_run_makes_a_sandbox_runs_and_destroys_it(app_client: Any) -> None:
    out = frames(app_client.post(RUN, json={"spec": {"provider": "fake"}, "exec": {"command": ["echo", "hi"]}}))
    assert types(out) == ["sandbox", "run", "stdout", "exit", "done"]
    sandbox, exit_, done = out[0], out[3], out[4]
    assert (sandbox["created"], sandbox["kept"]) == (True, False)
    assert out[2]["data"] == "hi\n" and exit_["exit_code"] == 0 and exit_["sandbox_id"] == sandbox["sandbox_id"]
    assert done == {"type": "done", "sandbox_id": sandbox["sandbox_id"], "destroyed": True}
    assert state(app_client, sandbox["sandbox_id"]) == "destroyed"
    assert app_client.get("/v1/sandboxes").json() == []


def test_the_workloads_exit_code_is_not_a_failure(app_client: Any) -> None:
    out = frames(app_client.post(RUN, json={"spec": {"provider": "fake"}, "exec": {"command": "exit 3"}}))
    assert types(out)[-2:] == ["exit", "done"] and out[-2]["exit_code"] == 3 and out[-1]["destroyed"]


def test_kept_and_given_sandboxes_stay(app_client: Any) -> None:
    kept = frames(app_client.post(RUN, json={"spec": {"provider": "fake"}, "keep": True, "exec": {"command": "true"}}))
    sbx = kept[0]["sandbox_id"]
    assert kept[0]["kept"] and not kept[-1]["destroyed"] and state(app_client, sbx) == "running"
    given = frames(app_client.post(RUN, json={"sandbox": sbx, "exec": {"command": "echo again"}}))
    assert given[0] == {"type": "sandbox", "sandbox_id": sbx, "name": None, "created": False, "kept": True}
    assert not given[-1]["destroyed"] and state(app_client, sbx) == "running"


def test_a_reuse_key_or_a_tenant_is_made_once_and_kept(app_client: Any) -> None:
    for key in ({"reuse_key": "k1"}, {"tenant": "alice"}):
        req = {"spec": {"provider": "fake"} | key, "exec": {"command": "true"}}
        first, again = frames(app_client.post(RUN, json=req)), frames(app_client.post(RUN, json=req))
        assert (first[0]["created"], again[0]["created"]) == (True, False)
        assert first[0]["sandbox_id"] == again[0]["sandbox_id"] and first[0]["kept"] and not again[-1]["destroyed"]


def test_a_tree_goes_in_a_script_runs_and_the_workspace_comes_back(app_client: Any, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "in.txt").write_text("from the client\n")
    plan = transfer.plan_push(tree, (), {})
    push = transfer.push_body(tree, plan.manifest, plan.send)
    script = {"path": "/tmp/script.sh", "data": base64.b64encode(b"cat in.txt").decode(), "mode": 0o600}
    req = {"spec": {"provider": "fake"}, "files": [script], "pull": True, "exec": {"command": ["sh", "/tmp/script.sh"]}}
    resp = app_client.post(RUN, content=framed(req, push), headers={"content-type": FRAMED})
    out = frames(resp)
    assert types(out)[:2] == ["sandbox", "pushed"] and out[1]["files_sent"] == 1
    pulled = b"".join(base64.b64decode(f["data"]) for f in out if f["type"] == "pull")
    with tarfile.open(fileobj=io.BytesIO(pulled)) as tar:
        member = tar.extractfile("./in.txt")
        assert member is not None and member.read() == b"from the client\n"
    assert types(out)[-1] == "done" and out[-1]["destroyed"]


def test_what_fails_before_the_sandbox_exists_is_a_plain_error_and_makes_nothing(app_client: Any) -> None:
    cases = [
        ({"spec": {"provider": "fake", "limits": {"memory": "banana"}}, "exec": {"command": "true"}}, 400),
        ({"spec": {"provider": "fake"}, "exec": {"command": "true", "background": True}}, 400),
        ({"sandbox": "no-such-sandbox", "exec": {"command": "true"}}, 404),
        ({"exec": {"command": "true"}}, 400),
        ({"spec": {"provider": "fake"}, "exec": {"command": "true"}, "push_size": 10}, 400),  # JSON carries no push
    ]
    for req, status in cases:
        resp = app_client.post(RUN, json=req)
        assert resp.status_code == status, (req, resp.text)
        assert set(resp.json()) == {"error"}
    bad = app_client.post(RUN, content=b"x" * 30, headers={"content-type": FRAMED})
    assert bad.status_code == 400 and "length" in bad.json()["error"]["message"]
    assert app_client.get("/v1/sandboxes", params={"all": "true"}).json() == []


def test_a_failure_after_the_sandbox_exists_destroys_it_and_is_the_last_frame(app_client: Any, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a")
    plan = transfer.plan_push(tree, (), {})
    push = transfer.push_body(tree, plan.manifest, [])  # the manifest names a file the tar lacks
    req = {"spec": {"provider": "fake"}, "exec": {"command": "true"}}
    out = frames(app_client.post(RUN, content=framed(req, push), headers={"content-type": FRAMED}))
    assert types(out) == ["sandbox", "error"] and out[1]["error"]["kind"] == "conflict"
    assert state(app_client, out[0]["sandbox_id"]) == "destroyed"
    assert not list((app_client.app.state.service.settings.home / "tmp").glob("*"))  # no spooled push left


# -- the request as it arrives: the command's input by credit, and a client that leaves ----------


class Exchange:
    """One request to the app, driven by hand: what the client sends, and the frames back."""

    def __init__(self, service: Service, media: str = FRAMED) -> None:
        self.app = create_app(service)
        self.inbound: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.pending = b""
        self.status = 0
        self.media = media

    def send_body(self, data: bytes, more: bool = True) -> None:
        self.inbound.put_nowait({"type": "http.request", "body": data, "more_body": more})

    def leave(self) -> None:
        self.inbound.put_nowait({"type": "http.disconnect"})

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        self.pending += message.get("body", b"")
        while b"\n" in self.pending:
            line, _, self.pending = self.pending.partition(b"\n")
            self.lines.put_nowait(json.loads(line))
        if not message.get("more_body"):
            self.lines.put_nowait(None)

    def start(self) -> asyncio.Task[None]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": RUN,
            "raw_path": RUN.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", self.media.encode())],
            "client": ("test", 1),
            "server": ("test", 80),
        }
        return asyncio.ensure_future(self.app(scope, self.inbound.get, self._send))

    async def until(self, kind: str) -> dict[str, Any]:
        while True:
            frame = await asyncio.wait_for(self.lines.get(), 60)
            assert frame is not None, f"the answer ended before a {kind} frame"
            if frame["type"] == kind:
                return frame


async def eventually(what: str, check: Callable[[], Awaitable[bool]] | Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while True:
        got = check()
        if await got if asyncio.iscoroutine(got) else got:
            return
        assert time.monotonic() < deadline, f"no {what} in 60 s"
        await asyncio.sleep(0.01)


def test_the_commands_input_flows_as_the_daemon_asks_for_it(service: Service) -> None:
    async def main() -> None:
        ex = Exchange(service)
        req = {"spec": {"provider": "fake"}, "stream_input": True, "exec": {"command": "cat"}}
        ex.send_body(framed(req))
        task = ex.start()
        assert (await ex.until("input"))["credit"] == WINDOW
        ex.send_body(b"hello ")
        ex.send_body(b"world", more=False)
        out = await ex.until("stdout")
        text = out["data"]
        while text != "hello world":
            text += (await ex.until("stdout"))["data"]
        assert (await ex.until("exit"))["exit_code"] == 0
        assert (await ex.until("done"))["destroyed"]
        ex.leave()
        await task

    asyncio.run(main())


def test_input_the_daemon_did_not_ask_for_is_refused(service: Service) -> None:
    async def main() -> None:
        ex = Exchange(service)
        ex.send_body(framed({"spec": {"provider": "fake"}, "exec": {"command": "sleep 30"}}) + b"unasked")
        task = ex.start()
        assert "more bytes" in (await ex.until("error"))["error"]["message"]
        await eventually("a sandbox", lambda: bool(service.list(include_all=True)))
        await eventually("destroy", lambda: service.list(include_all=True)[0].state.value == "destroyed")
        ex.leave()
        await task

    asyncio.run(main())


def test_a_provider_without_live_input_gets_it_whole(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = service.provider("fake")
    monkeypatch.setattr(fake, "capabilities", dataclasses.replace(fake.capabilities, interactive=False))

    async def main() -> None:
        ex = Exchange(service)
        ex.send_body(framed({"spec": {"provider": "fake"}, "stream_input": True, "exec": {"command": "cat"}}))
        task = ex.start()
        assert (await ex.until("input"))["credit"] == WINDOW  # before the run: the input goes with it
        ex.send_body(b"whole", more=False)
        await ex.until("run")
        assert (await ex.until("stdout"))["data"] == "whole"
        await ex.until("done")
        ex.leave()
        await task

    asyncio.run(main())


@pytest.mark.parametrize("keep", [False, True])
def test_a_client_that_leaves_has_the_sandbox_it_made_destroyed(service: Service, keep: bool) -> None:
    async def main() -> None:
        ex = Exchange(service, media="application/json")
        ex.send_body(json.dumps({"spec": {"provider": "fake"}, "keep": keep, "exec": {"command": "sleep 30"}}).encode(), False)
        task = ex.start()
        sbx = (await ex.until("sandbox"))["sandbox_id"]
        run = await ex.until("run")
        ex.leave()  # killed: the connection is gone
        await asyncio.wait_for(task, 60)
        if keep:  # it stays, and its run goes on, as an exec's does
            await asyncio.sleep(0.2)
            assert service.get(sbx).state.value == "running" and service.runs.get(run["run_id"])["status"] == "running"
        else:
            await eventually("destroy", lambda: service.get(sbx).state.value == "destroyed")
            await eventually("the run's end", lambda: service.runs.get(run["run_id"])["status"] != "running")
            assert [e["data"]["cause"] for e in service.events.list(sbx, types=["sandbox_destroyed"])] == ["its client left"]

    asyncio.run(main())


def test_a_stopping_daemon_destroys_what_runs_in_progress_made(service: Service) -> None:
    async def main() -> None:
        ex = Exchange(service, media="application/json")
        ex.send_body(json.dumps({"spec": {"provider": "fake"}, "exec": {"command": "sleep 30"}}).encode(), False)
        task = ex.start()
        sbx = (await ex.until("sandbox"))["sandbox_id"]
        await ex.until("run")
        await service.oneshot.settle()
        assert service.get(sbx).state.value == "destroyed"
        ex.leave()
        await asyncio.wait_for(task, 60)

    asyncio.run(main())


def test_a_kill_that_races_the_destroy_of_its_sandbox_says_the_run_is_over(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C on hutch run: the kill ends the run, the run's end destroys the sandbox, and the
    destroy may cut the kill's own reply; the kill then answers, not fails."""
    fake = service.provider("fake")
    real_kill = fake.kill_run

    async def kill_then_lose_the_reply(rec: Any, run_id: str, sig: int) -> bool:
        await real_kill(rec, run_id, sig)
        await eventually("the destroy", lambda: service.get(rec.id).state.value in ("destroying", "destroyed"))
        raise UnavailableError("the sandbox agent closed the connection")

    monkeypatch.setattr(fake, "kill_run", kill_then_lose_the_reply)

    async def main() -> None:
        ex = Exchange(service, media="application/json")
        ex.send_body(json.dumps({"spec": {"provider": "fake"}, "exec": {"command": "sleep 30"}}).encode(), False)
        task = ex.start()
        run = await ex.until("run")
        killed = await service.runs.kill(run["run_id"], "KILL")
        assert killed["signalled"] is False and killed["status"] == "killed", killed
        assert (await ex.until("done"))["destroyed"]
        ex.leave()
        await task

    asyncio.run(main())
