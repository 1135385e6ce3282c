"""The asynchronous client: the methods of :class:`~hutch.client.Client` the SDK's
``AsyncSandbox`` and the MCP server use, awaited, over an httpx connection pool
(:class:`~hutch.client.transport.AsyncTransport`)."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hutch.client import paths
from hutch.client.endpoint import Endpoint
from hutch.client.retry import new_key
from hutch.client.transport import AsyncTransport
from hutch.config import Settings
from hutch.errors import UnavailableError

if TYPE_CHECKING:
    import httpx

    from hutch import wire
    from hutch.client.oneshot import AsyncRunOnceStream
    from hutch.client.transfer import Progress


class AsyncClient:
    """Asynchronous client with the same methods as :class:`~hutch.client.Client`."""

    def __init__(self, settings: Settings | None = None, autostart: bool = True) -> None:
        self.settings = settings or Settings.load()
        self.endpoint = Endpoint.from_settings(self.settings)
        # never start a daemon for HUTCH_HOST
        self.transport = AsyncTransport(self.settings, self.endpoint, autostart and not self.endpoint.remote)
        self.http = self.transport.http  # the httpx.AsyncClient

    async def close(self) -> None:
        await self.transport.close()

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return await self.transport.request(method, url, **kw)

    async def json(self, method: str, url: str, **kw: Any) -> Any:
        return (await self.request(method, url, **kw)).json()

    async def events(
        self,
        ref: str | None = None,
        *,
        types: builtins.list[str] | None = None,
        since: float | None = None,
        after: int = 0,
        limit: int = 1000,
        run: str | None = None,
    ) -> builtins.list[wire.Event]:
        params = paths.event_params(ref, types, since, after, limit, run)
        return cast("builtins.list[wire.Event]", await self.json("GET", "/v1/events", params=params))

    # -- sandboxes ----------------------------------------------------------------------
    async def create(self, spec: wire.SandboxSpec) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("POST", "/v1/sandboxes", json=spec, headers=new_key()))

    async def list(
        self, include_all: bool = False, labels: dict[str, str] | None = None, state: str | None = None
    ) -> builtins.list[wire.SandboxRecord]:
        params = {k: v for k, v in paths.list_params(include_all, labels, state).items() if v is not None}
        return cast("builtins.list[wire.SandboxRecord]", await self.json("GET", "/v1/sandboxes", params=params))

    async def get(self, ref: str) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("GET", paths.sandbox(ref)))

    async def _orphaned(self, ref: str) -> object:
        """:meth:`hutch.client.Client._orphaned` for the async client."""
        try:
            return await (self.destroy(ref) if ref else self.json("GET", "/v1/health"))
        except UnavailableError:
            return await (self.destroy(ref) if ref else self.json("GET", "/v1/health"))

    async def destroy(self, ref: str, approval: str | None = None) -> wire.DestroyResult:
        params = {"approval": approval} if approval else None
        return cast("wire.DestroyResult", await self.json("DELETE", paths.sandbox(ref), params=params))

    async def policy(self, ref: str, change: wire.PolicyChange, approval: str | None = None) -> wire.SandboxRecord:
        params = {"approval": approval} if approval else None
        return cast("wire.SandboxRecord", await self.json("POST", paths.sandbox(ref) + "/policy", json=change, params=params))

    async def pause(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", await self.json("POST", paths.sandbox(ref) + "/pause"))

    async def resume(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", await self.json("POST", paths.sandbox(ref) + "/resume"))

    async def keepalive(self, ref: str, ttl: str | float | None = None) -> wire.Deadlines:
        return cast("wire.Deadlines", await self.json("POST", paths.sandbox(ref) + "/keepalive", json={"ttl": ttl}))

    async def subagent(self, ref: str, req: wire.SubagentRequest) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("POST", paths.sandbox(ref) + "/subagents", json=req))

    async def label(self, ref: str, set_: dict[str, str], remove: builtins.list[str]) -> wire.SandboxRecord:
        body = {"set": set_, "remove": remove}
        return cast("wire.SandboxRecord", await self.json("POST", paths.sandbox(ref) + "/labels", json=body))

    async def ps(self, ref: str) -> builtins.list[wire.Process]:
        return cast("builtins.list[wire.Process]", await self.json("GET", paths.sandbox(ref) + "/ps"))

    # -- runs ---------------------------------------------------------------------------
    async def exec(self, ref: str, req: wire.ExecRequest) -> wire.ExecResult:
        """Run in the foreground: the result (a background run: :meth:`start`)."""
        headers = new_key() if req.get("background") else None
        return cast("wire.ExecResult", await self.json("POST", paths.sandbox(ref) + "/exec", json=req, headers=headers))

    async def start(self, ref: str, req: wire.ExecRequest) -> wire.RunRecord:
        """Start in the background: the run's record at once (the request is sent once per key)."""
        body = {**req, "background": True}
        return cast("wire.RunRecord", await self.json("POST", paths.sandbox(ref) + "/exec", json=body, headers=new_key()))

    async def run_once(
        self, req: wire.RunOnceRequest, *, sync: str | None = None, progress: Progress | None = None
    ) -> AsyncRunOnceStream:
        """:meth:`hutch.client.Client.run_once`, awaited (the command's input goes whole, in ``req``)."""
        import asyncio

        from hutch.client import oneshot

        push = None
        if sync:
            from hutch.client import transfer

            kept: dict[str, wire.ManifestEntry] = {}
            if oneshot.kept_line(req):  # only what changed since that sandbox's last push travels
                if "sandbox" not in req:
                    req = oneshot.in_sandbox(req, (await self.ensure(req["spec"]))["sandbox"]["id"])
                kept = cast("wire.Manifest", await self.json("GET", paths.sandbox(req["sandbox"]) + "/manifest"))["files"]
            plan = await asyncio.to_thread(transfer.plan_push, Path(sync), (), kept)
            push = await asyncio.to_thread(transfer.push_body, Path(sync), plan.manifest, plan.send, progress)
        return oneshot.astream(self.transport, req, push, sync, self._orphaned)

    async def runs(self, ref: str, status: str | None = None) -> builtins.list[wire.RunRecord]:
        params = {"status": status} if status else None
        return cast("builtins.list[wire.RunRecord]", await self.json("GET", paths.sandbox(ref) + "/runs", params=params))

    async def run(self, run_id: str) -> wire.RunRecord:
        return cast("wire.RunRecord", await self.json("GET", paths.run(run_id)))

    async def wait(self, run_id: str, timeout: float | None = None) -> wire.RunRecord:
        params = {"timeout": timeout} if timeout is not None else None
        return cast("wire.RunRecord", await self.json("POST", paths.run(run_id) + "/wait", params=params))

    async def kill(self, run_id: str, signal: str | int = "TERM") -> wire.KillResult:
        return cast("wire.KillResult", await self.json("POST", paths.run(run_id) + "/kill", json={"signal": signal}))

    async def output(self, run_id: str, stdout_offset: int = 0, stderr_offset: int = 0, limit: int = 1 << 20) -> wire.OutputPage:
        params = {"stdout_offset": stdout_offset, "stderr_offset": stderr_offset, "limit": limit}
        return cast("wire.OutputPage", await self.json("GET", paths.run(run_id) + "/output", params=params))

    async def logs(self, ref: str, run: str | None = None, offset: int = 0, limit: int = 1 << 20) -> wire.Transcript:
        params: dict[str, Any] = {"offset": offset, "limit": limit} | ({"run": run} if run else {})
        return cast("wire.Transcript", await self.json("GET", paths.sandbox(ref) + "/logs", params=params))

    # -- files --------------------------------------------------------------------------
    async def read_file(self, ref: str, path: str) -> tuple[bytes, bool]:
        resp = await self.request("GET", paths.sandbox(ref) + "/files", params={"path": path})
        return resp.content, paths.truncated(resp)

    async def read_page(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        """``limit`` bytes from ``offset``; whether more follow; the file's size when known."""
        params = {"path": path, "offset": offset, "limit": limit}
        return paths.page(await self.request("GET", paths.sandbox(ref) + "/files", params=params))

    async def write_file(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> wire.FileWritten:
        params = {"path": path, "mode": f"{mode:o}"}
        return cast("wire.FileWritten", await self.json("PUT", paths.sandbox(ref) + "/files", params=params, content=data))

    async def list_files(self, ref: str, path: str | None = None) -> builtins.list[wire.FileEntry]:
        params = {"path": path} if path else {}
        return cast("builtins.list[wire.FileEntry]", await self.json("GET", paths.sandbox(ref) + "/ls", params=params))

    async def diff(self, ref: str, since: float | None = None, path: str | None = None) -> wire.ChangeList:
        """What the sandbox changed (at or under ``path``), at or after ``since`` (a Unix time)."""
        params: dict[str, str] = ({"since": repr(float(since))} if since is not None else {}) | ({"path": path} if path else {})
        return cast("wire.ChangeList", await self.json("GET", paths.sandbox(ref) + "/diff", params=params))

    # -- exposed ports --------------------------------------------------------------------
    async def expose(self, ref: str, port: int, public: bool = False) -> wire.ExposedPort:
        body = {"port": port, "public": public}
        return cast("wire.ExposedPort", await self.json("POST", paths.sandbox(ref) + "/ports", json=body))

    async def ports(self, ref: str) -> builtins.list[wire.ExposedPort]:
        return cast("builtins.list[wire.ExposedPort]", await self.json("GET", paths.sandbox(ref) + "/ports"))

    async def unexpose(self, ref: str, port: int) -> wire.Unexposed:
        return cast("wire.Unexposed", await self.json("DELETE", paths.sandbox(ref) + f"/ports/{int(port)}"))

    # -- workspaces ---------------------------------------------------------------------
    async def ensure(self, spec: wire.SandboxSpec) -> wire.Session:
        return cast("wire.Session", await self.json("POST", "/v1/sessions", json=spec))

    async def push(
        self,
        ref: str,
        root: str,
        *,
        delete: bool = False,
        exclude: Iterable[str] = (),
        dry_run: bool = False,
        force: bool = False,
        progress: Progress | None = None,
        approval: str | None = None,
    ) -> wire.PushSummary:
        import asyncio

        from hutch.client import transfer

        kept = cast("wire.Manifest", await self.json("GET", paths.sandbox(ref) + "/manifest"))["files"]
        plan = await asyncio.to_thread(transfer.plan_push, Path(root), exclude, kept)
        body = await asyncio.to_thread(transfer.push_body, Path(root), plan.manifest, [] if dry_run else plan.send, progress)
        params = {"delete": delete, "force": force, "dry_run": dry_run, "approval": approval}
        answer = await self.json("POST", paths.sandbox(ref) + "/push", params=paths.clean(params), content=body)
        return plan.summary(cast("wire.PushResult", answer))

    async def pull(self, ref: str, dest: str, *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        import asyncio

        from hutch.client import transfer

        data = (await self.request("GET", paths.sandbox(ref) + "/pull")).content
        return await asyncio.to_thread(transfer.pull_into, data, Path(dest), force=force, dry_run=dry_run)

    async def snapshot_save(self, ref: str, name: str) -> wire.SnapshotRecord:
        return cast("wire.SnapshotRecord", await self.json("POST", paths.sandbox(ref) + "/snapshots", json={"name": name}))

    async def snapshot_restore(self, name: str, new_name: str | None = None) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", await self.json("POST", paths.snapshot(name) + "/restore", json={"name": new_name}))

    async def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> wire.ForkResult:
        body = {"count": count, "name_prefix": name_prefix}
        return cast("wire.ForkResult", await self.json("POST", paths.sandbox(ref) + "/fork", json=body))

    # -- approvals ----------------------------------------------------------------------
    async def request_approval(self, req: wire.ApprovalRequest) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", await self.json("POST", "/v1/approvals", json=req))

    async def approvals(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[wire.ApprovalRecord]:
        params: dict[str, Any] = {"pending": pending} | ({"sandbox": sandbox} if sandbox else {})
        return cast("builtins.list[wire.ApprovalRecord]", await self.json("GET", "/v1/approvals", params=params))

    async def approval(self, approval_id: str) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", await self.json("GET", paths.approval(approval_id)))

    async def wait_approval(self, approval_id: str, timeout: float | None = None) -> wire.ApprovalRecord:
        params = {"timeout": timeout} if timeout is not None else None
        return cast("wire.ApprovalRecord", await self.json("POST", paths.approval(approval_id) + "/wait", params=params))

    async def decide(
        self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None
    ) -> wire.ApprovalRecord:
        body = {"approve": approve, "reason": reason, "by": by}
        return cast("wire.ApprovalRecord", await self.json("POST", paths.approval(approval_id) + "/decision", json=body))

    # -- API keys (a gateway's admin) -----------------------------------------------------
    async def create_key(self, req: wire.KeyRequest) -> wire.KeyCreated:
        return cast("wire.KeyCreated", await self.json("POST", "/v1/keys", json=req))

    async def keys(self) -> builtins.list[wire.KeyRecord]:
        return cast("builtins.list[wire.KeyRecord]", await self.json("GET", "/v1/keys"))

    async def revoke_key(self, ref: str) -> wire.KeyRevoked:
        return cast("wire.KeyRevoked", await self.json("DELETE", paths.key(ref)))

    async def rotate_key(self, ref: str, ttl: float | str | None = None) -> wire.KeyCreated:
        return cast("wire.KeyCreated", await self.json("POST", paths.key(ref) + "/rotate", json={"ttl": ttl}))

    async def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text (the metrics scope)."""
        return (await self.request("GET", "/metrics")).content.decode()

    # -- images -------------------------------------------------------------------------
    def image_pull(self, ref: str, *, insecure: bool = False, platform: str | None = None) -> AsyncIterator[wire.ImagePullFrame]:
        from hutch.client import images

        headers = images.login_headers(self.endpoint, ref)
        body = {"ref": ref, "insecure": insecure} | ({"platform": platform} if platform else {})
        return self.transport.stream("POST", "/v1/images/pull", json=body, headers=headers)

    def image_import(
        self, source: str, name: str | None = None, changes: wire.CommitChanges | None = None
    ) -> AsyncIterator[wire.ImagePullFrame]:
        from hutch.client import images

        up = images.upload(source, name)
        params = {"format": up.format, **up.params, **images.changes_param(changes)}
        return self.transport.stream(
            "POST", "/v1/images/import", params=params, content=images.aiter_chunks(up.chunks), content_type="application/x-tar"
        )

    async def image_commit(
        self,
        sandbox: str,
        name: str,
        *,
        pause: bool = True,
        changes: wire.CommitChanges | None = None,
        comment: str | None = None,
    ) -> wire.ImageCommitted:
        """The sandbox's writable root as a new layer on its image, stored as ``name``; ``changes``
        edit the new image's config (env, workdir, user, cmd, entrypoint), ``comment`` is its history entry."""
        body: dict[str, Any] = {"sandbox": sandbox, "name": name, "pause": pause}
        body |= {"changes": changes} if changes else {}
        body |= {"comment": comment} if comment else {}
        return cast("wire.ImageCommitted", await self.json("POST", "/v1/images/commit", json=body))

    async def images(self) -> builtins.list[wire.ImageRecord]:
        return cast("builtins.list[wire.ImageRecord]", await self.json("GET", "/v1/images"))

    async def image_inspect(self, ref: str) -> wire.ImageRecord:
        return cast("wire.ImageRecord", await self.json("GET", "/v1/images/inspect", params={"ref": ref}))

    async def image_rm(self, ref: str, force: bool = False) -> wire.ImageRemoved:
        params = {"ref": ref, "force": force}
        return cast("wire.ImageRemoved", await self.json("DELETE", "/v1/images", params=params))

    async def image_prune(self) -> wire.ImagePruned:
        return cast("wire.ImagePruned", await self.json("POST", "/v1/images/prune"))

    async def ui_link(self) -> wire.UiLink:
        """A one-time link that logs a browser into the dashboard as this client's caller."""
        return cast("wire.UiLink", await self.json("POST", "/v1/ui/links"))
