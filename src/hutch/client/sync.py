"""The synchronous client: one method per call of the API, each returning its wire body.

The requests go through a :class:`~hutch.client.transport.Transport` (standard library
only: the CLI's start-up budget); :class:`~hutch.client.aio.AsyncClient` has the same
methods over httpx.
"""

from __future__ import annotations

import builtins

from hutch.casts import cast
from hutch.client import paths
from hutch.client.endpoint import Endpoint
from hutch.client.retry import new_key
from hutch.client.transport import Response, Transport
from hutch.config import Settings
from hutch.errors import UnavailableError

TYPE_CHECKING = False  # typing, collections and pathlib stay out of the CLI's start
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any, Unpack

    from hutch import wire
    from hutch.client.oneshot import RunOnceStream
    from hutch.client.transfer import Progress


class Client:
    """Synchronous client over the daemon's unix socket (starting the daemon on demand unless
    ``autostart=False``), or over TCP to ``HUTCH_HOST``."""

    def __init__(self, settings: Settings | None = None, autostart: bool = True) -> None:
        self.settings = settings or Settings.load()
        self.endpoint = Endpoint.from_settings(self.settings)
        # never start a daemon for HUTCH_HOST
        self.transport = Transport(self.settings, self.endpoint, autostart and not self.endpoint.remote)

    def close(self) -> None:
        """Nothing to release: the connections kept alive are the process's, a few at most
        (:class:`hutch.client.transport.Kept`)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        return self.transport.request(method, url, params=params, json=json, content=content, headers=headers)

    def stream(self, method: str, url: str, *, params: dict[str, Any] | None = None, json: Any = None) -> Iterator[Any]:
        """An NDJSON response, one parsed line at a time, as the daemon sends them."""
        return self.transport.stream(method, url, params=params, json=json)

    def json(self, method: str, url: str, **kw: Any) -> Any:
        return self.request(method, url, **kw).json()

    # -- the daemon ---------------------------------------------------------------------
    def health(self) -> wire.Health:
        return cast("wire.Health", self.json("GET", "/v1/health"))

    def _orphaned(self, ref: str) -> object:
        """hutch run's answer was cut short: destroy the sandbox it made (``""``: not named
        yet; a daemon started again destroys it as it starts). Asked twice: a daemon dying
        as it answered may still drop the first call, and only a call that finds no daemon
        starts one (a dropped call is sent again only to the daemon that dropped it)."""
        try:
            return self.destroy(ref) if ref else self.health()
        except UnavailableError:
            return self.destroy(ref) if ref else self.health()

    def doctor(self) -> wire.Doctor:
        return cast("wire.Doctor", self.json("GET", "/v1/doctor"))

    def pool_status(self) -> wire.PoolStatus:
        return cast("wire.PoolStatus", self.json("GET", "/v1/pool"))

    def pool_set(self, size: int, image: str | None = None) -> wire.PoolStatus:
        body: wire.PoolSetRequest = {"size": size, "image": image}
        return cast("wire.PoolStatus", self.json("POST", "/v1/pool", json=body))

    def cluster_status(self) -> wire.ClusterStatus:
        return cast("wire.ClusterStatus", self.json("GET", "/v1/cluster"))

    def cluster_nodes(self) -> builtins.list[wire.NodeRecord]:
        return cast("builtins.list[wire.NodeRecord]", self.json("GET", "/v1/cluster/nodes"))

    def cluster_drain(self, name: str, drained: bool = True, move: bool = False) -> wire.Drained:
        url = paths.node(name) + "/drain"
        body: wire.DrainRequest = {"drained": drained, "move": move}
        return cast("wire.Drained", self.json("POST", url, json=body))

    def pool_drain(self, image: str | None = None, all_shapes: bool = False) -> wire.PoolDrained:
        body: wire.PoolDrainRequest = {"image": image, "all": all_shapes}
        return cast("wire.PoolDrained", self.json("POST", "/v1/pool/drain", json=body))

    def shutdown(self) -> wire.Shutdown:
        return cast("wire.Shutdown", self.json("POST", "/v1/shutdown"))

    def inventory(self, provider: str, metro: str | None = None, include_all: bool = False) -> wire.Inventory:
        params: dict[str, Any] = {"all": include_all} | ({"metro": metro} if metro else {})
        return cast("wire.Inventory", self.json("GET", paths.provider(provider) + "/inventory", params=params))

    def cleanup(self, **req: Unpack[wire.CleanupRequest]) -> wire.CleanupReport:
        return cast("wire.CleanupReport", self.json("POST", "/v1/cleanup", json=req))

    def events(
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
        return cast("builtins.list[wire.Event]", self.json("GET", "/v1/events", params=params))

    # -- sandboxes ----------------------------------------------------------------------
    def create(self, spec: wire.SandboxSpec) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", "/v1/sandboxes", json=spec, headers=new_key()))

    def list(
        self, include_all: bool = False, labels: dict[str, str] | None = None, state: str | None = None
    ) -> builtins.list[wire.SandboxRecord]:
        params = paths.list_params(include_all, labels, state)
        return cast("builtins.list[wire.SandboxRecord]", self.json("GET", "/v1/sandboxes", params=params))

    def get(self, ref: str) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("GET", paths.sandbox(ref)))

    def destroy(self, ref: str, approval: str | None = None) -> wire.DestroyResult:
        return cast("wire.DestroyResult", self.json("DELETE", paths.sandbox(ref), params={"approval": approval}))

    def status(self, ref: str, wait: bool = False, timeout: float = 300.0) -> wire.SandboxStatus:
        params = {"wait": wait, "timeout": timeout}
        return cast("wire.SandboxStatus", self.json("GET", paths.sandbox(ref) + "/status", params=params))

    def policy(self, ref: str, change: wire.PolicyChange, approval: str | None = None) -> wire.SandboxRecord:
        params = {"approval": approval}
        return cast("wire.SandboxRecord", self.json("POST", paths.sandbox(ref) + "/policy", json=change, params=params))

    def pause(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", self.json("POST", paths.sandbox(ref) + "/pause"))

    def resume(self, ref: str) -> wire.StateChange:
        return cast("wire.StateChange", self.json("POST", paths.sandbox(ref) + "/resume"))

    def keepalive(self, ref: str, ttl: str | float | None = None) -> wire.Deadlines:
        return cast("wire.Deadlines", self.json("POST", paths.sandbox(ref) + "/keepalive", json={"ttl": ttl}))

    def subagent(self, ref: str, req: wire.SubagentRequest) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", paths.sandbox(ref) + "/subagents", json=req))

    def label(self, ref: str, set_: dict[str, str], remove: builtins.list[str]) -> wire.SandboxRecord:
        body = {"set": set_, "remove": remove}
        return cast("wire.SandboxRecord", self.json("POST", paths.sandbox(ref) + "/labels", json=body))

    def ps(self, ref: str) -> builtins.list[wire.Process]:
        return cast("builtins.list[wire.Process]", self.json("GET", paths.sandbox(ref) + "/ps"))

    # -- runs ---------------------------------------------------------------------------
    def exec(self, ref: str, req: wire.ExecRequest) -> wire.ExecResult:
        """Run in the foreground: the result (a background run: :meth:`start`)."""
        headers = new_key() if req.get("background") else None
        return cast("wire.ExecResult", self.json("POST", paths.sandbox(ref) + "/exec", json=req, headers=headers))

    def start(self, ref: str, req: wire.ExecRequest) -> wire.RunRecord:
        """Start in the background: the run's record at once (the request is sent once per key)."""
        body = {**req, "background": True}
        return cast("wire.RunRecord", self.json("POST", paths.sandbox(ref) + "/exec", json=body, headers=new_key()))

    def exec_stream(self, ref: str, req: wire.ExecRequest) -> Iterator[wire.ExecFrame]:
        return self.stream("POST", paths.sandbox(ref) + "/exec", params={"stream": True}, json=req)

    def run_once(
        self, req: wire.RunOnceRequest, *, sync: str | None = None, stdin: int | None = None, progress: Progress | None = None
    ) -> RunOnceStream:
        """hutch run in one request (see :mod:`hutch.client.oneshot`): ``sync`` is a local tree
        pushed first (and with ``req["pull"]``, where the workspace is unpacked after);
        ``stdin`` a file descriptor whose data streams to the command as it asks for it."""
        from hutch.client import oneshot

        push = None
        if sync:
            from pathlib import Path

            from hutch.client import transfer

            kept: dict[str, wire.ManifestEntry] = {}
            if oneshot.kept_line(req):  # only what changed since that sandbox's last push travels
                if "sandbox" not in req:
                    sandbox = self.ensure(req["spec"])["sandbox"]["id"]
                    req = oneshot.in_sandbox(req, sandbox)
                kept = cast("wire.Manifest", self.json("GET", paths.sandbox(req["sandbox"]) + "/manifest"))["files"]
            plan = transfer.plan_push(Path(sync), (), kept)
            push = transfer.push_body(Path(sync), plan.manifest, plan.send, progress)
        if stdin is not None:
            return oneshot.duplex(self.transport, req, push, sync, stdin, self._orphaned)
        return oneshot.stream(self.transport, req, push, sync, self._orphaned)

    def runs(self, ref: str, status: str | None = None) -> builtins.list[wire.RunRecord]:
        params = {"status": status} if status else None
        return cast("builtins.list[wire.RunRecord]", self.json("GET", paths.sandbox(ref) + "/runs", params=params))

    def run(self, run_id: str) -> wire.RunRecord:
        return cast("wire.RunRecord", self.json("GET", paths.run(run_id)))

    def wait(self, run_id: str, timeout: float | None = None) -> wire.RunRecord:
        params = {"timeout": timeout} if timeout is not None else None
        return cast("wire.RunRecord", self.json("POST", paths.run(run_id) + "/wait", params=params))

    def kill(self, run_id: str, signal: str | int = "TERM") -> wire.KillResult:
        return cast("wire.KillResult", self.json("POST", paths.run(run_id) + "/kill", json={"signal": signal}))

    def output(self, run_id: str, stdout_offset: int = 0, stderr_offset: int = 0, limit: int = 1 << 20) -> wire.OutputPage:
        params = {"stdout_offset": stdout_offset, "stderr_offset": stderr_offset, "limit": limit}
        return cast("wire.OutputPage", self.json("GET", paths.run(run_id) + "/output", params=params))

    def logs(self, ref: str, run: str | None = None, offset: int = 0, limit: int = 1 << 20) -> wire.Transcript:
        params: dict[str, Any] = {"offset": offset, "limit": limit} | ({"run": run} if run else {})
        return cast("wire.Transcript", self.json("GET", paths.sandbox(ref) + "/logs", params=params))

    # -- files --------------------------------------------------------------------------
    def read_file(self, ref: str, path: str) -> tuple[bytes, bool]:
        resp = self.request("GET", paths.sandbox(ref) + "/files", params={"path": path})
        return resp.content, paths.truncated(resp)

    def read_page(self, ref: str, path: str, offset: int, limit: int) -> tuple[bytes, bool, int | None]:
        """``limit`` bytes from ``offset``; whether more follow; the file's size when known."""
        params = {"path": path, "offset": offset, "limit": limit}
        return paths.page(self.request("GET", paths.sandbox(ref) + "/files", params=params))

    def write_file(self, ref: str, path: str, data: bytes, mode: int = 0o644) -> wire.FileWritten:
        params = {"path": path, "mode": f"{mode:o}"}
        return cast("wire.FileWritten", self.json("PUT", paths.sandbox(ref) + "/files", params=params, content=data))

    def list_files(self, ref: str, path: str | None = None) -> builtins.list[wire.FileEntry]:
        params = {"path": path} if path else {}
        return cast("builtins.list[wire.FileEntry]", self.json("GET", paths.sandbox(ref) + "/ls", params=params))

    def diff(self, ref: str, since: float | None = None, path: str | None = None) -> wire.ChangeList:
        """What the sandbox changed (at or under ``path``), at or after ``since`` (a Unix time)."""
        params: dict[str, str] = ({"since": repr(float(since))} if since is not None else {}) | ({"path": path} if path else {})
        return cast("wire.ChangeList", self.json("GET", paths.sandbox(ref) + "/diff", params=params))

    # -- workspaces ---------------------------------------------------------------------
    def ensure(self, spec: wire.SandboxSpec) -> wire.Session:
        return cast("wire.Session", self.json("POST", "/v1/sessions", json=spec))

    def tenants(self) -> builtins.list[wire.Tenant]:
        return cast("builtins.list[wire.Tenant]", self.json("GET", "/v1/tenants"))

    def delete_tenant(self, name: str) -> wire.TenantDeleted:
        return cast("wire.TenantDeleted", self.json("DELETE", paths.tenant(name)))

    def push(
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
        from pathlib import Path

        from hutch.client import transfer

        kept = cast("wire.Manifest", self.json("GET", paths.sandbox(ref) + "/manifest"))["files"]
        plan = transfer.plan_push(Path(root), exclude, kept)
        body = transfer.push_body(Path(root), plan.manifest, [] if dry_run else plan.send, progress)
        params = {"delete": delete, "force": force, "dry_run": dry_run, "approval": approval}
        answer = self.json("POST", paths.sandbox(ref) + "/push", params=params, content=body)
        return plan.summary(cast("wire.PushResult", answer))

    def pull(self, ref: str, dest: str, *, dry_run: bool = False, force: bool = False) -> wire.PullSummary:
        from pathlib import Path

        from hutch.client import transfer

        data = self.request("GET", paths.sandbox(ref) + "/pull").content
        return transfer.pull_into(data, Path(dest), force=force, dry_run=dry_run)

    def snapshot_save(self, ref: str, name: str) -> wire.SnapshotRecord:
        return cast("wire.SnapshotRecord", self.json("POST", paths.sandbox(ref) + "/snapshots", json={"name": name}))

    def snapshots(self) -> builtins.list[wire.SnapshotRecord]:
        return cast("builtins.list[wire.SnapshotRecord]", self.json("GET", "/v1/snapshots"))

    def snapshot_restore(self, name: str, new_name: str | None = None) -> wire.SandboxRecord:
        return cast("wire.SandboxRecord", self.json("POST", paths.snapshot(name) + "/restore", json={"name": new_name}))

    def snapshot_delete(self, name: str) -> wire.SnapshotDeleted:
        return cast("wire.SnapshotDeleted", self.json("DELETE", paths.snapshot(name)))

    def fork(self, ref: str, count: int = 1, name_prefix: str | None = None) -> wire.ForkResult:
        body = {"count": count, "name_prefix": name_prefix}
        return cast("wire.ForkResult", self.json("POST", paths.sandbox(ref) + "/fork", json=body))

    # -- approvals ----------------------------------------------------------------------
    def request_approval(self, req: wire.ApprovalRequest) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", self.json("POST", "/v1/approvals", json=req))

    def approvals(self, pending: bool = False, sandbox: str | None = None) -> builtins.list[wire.ApprovalRecord]:
        params = {"pending": pending, "sandbox": sandbox}
        return cast("builtins.list[wire.ApprovalRecord]", self.json("GET", "/v1/approvals", params=params))

    def approval(self, approval_id: str) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", self.json("GET", paths.approval(approval_id)))

    def wait_approval(self, approval_id: str, timeout: float | None = None) -> wire.ApprovalRecord:
        return cast("wire.ApprovalRecord", self.json("POST", paths.approval(approval_id) + "/wait", params={"timeout": timeout}))

    def decide(self, approval_id: str, approve: bool, reason: str | None = None, by: str | None = None) -> wire.ApprovalRecord:
        body = {"approve": approve, "reason": reason, "by": by}
        return cast("wire.ApprovalRecord", self.json("POST", paths.approval(approval_id) + "/decision", json=body))

    # -- API keys (a gateway's admin) -----------------------------------------------------
    def create_key(self, req: wire.KeyRequest) -> wire.KeyCreated:
        return cast("wire.KeyCreated", self.json("POST", "/v1/keys", json=req))

    def keys(self) -> builtins.list[wire.KeyRecord]:
        return cast("builtins.list[wire.KeyRecord]", self.json("GET", "/v1/keys"))

    def revoke_key(self, ref: str) -> wire.KeyRevoked:
        return cast("wire.KeyRevoked", self.json("DELETE", paths.key(ref)))

    def rotate_key(self, ref: str, ttl: float | str | None = None) -> wire.KeyCreated:
        return cast("wire.KeyCreated", self.json("POST", paths.key(ref) + "/rotate", json={"ttl": ttl}))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text (the metrics scope)."""
        return self.request("GET", "/metrics").content.decode()

    # -- images -------------------------------------------------------------------------
    def image_pull(self, ref: str, *, insecure: bool = False, platform: str | None = None) -> Iterator[wire.ImagePullFrame]:
        """Pull ``ref`` into the daemon's store: its frames, ``done`` (or ``error``) last. The
        caller's registry login (environment or docker config file) travels in a header."""
        from hutch.client import images

        headers = images.login_headers(self.endpoint, ref)
        body = {"ref": ref, "insecure": insecure} | ({"platform": platform} if platform else {})
        return self.transport.stream("POST", "/v1/images/pull", json=body, headers=headers)

    def image_import(
        self, source: str, name: str | None = None, changes: wire.CommitChanges | None = None
    ) -> Iterator[wire.ImagePullFrame]:
        """Upload ``source`` (``oci-archive:``, ``oci:``, ``docker-archive:``, ``rootfs:`` or ``-``) as an image;
        ``changes`` edit its config (env, workdir, user, cmd, entrypoint)."""
        from hutch.client import images

        up = images.upload(source, name)
        params = {"format": up.format, **up.params, **images.changes_param(changes)}
        headers = {"content-type": "application/x-tar"}
        return self.transport.stream("POST", "/v1/images/import", params=params, upload=up.chunks, headers=headers)

    def image_commit(
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
        return cast("wire.ImageCommitted", self.json("POST", "/v1/images/commit", json=body))

    def images(self) -> builtins.list[wire.ImageRecord]:
        return cast("builtins.list[wire.ImageRecord]", self.json("GET", "/v1/images"))

    def image_inspect(self, ref: str) -> wire.ImageRecord:
        return cast("wire.ImageRecord", self.json("GET", "/v1/images/inspect", params={"ref": ref}))

    def image_rm(self, ref: str, force: bool = False) -> wire.ImageRemoved:
        return cast("wire.ImageRemoved", self.json("DELETE", "/v1/images", params={"ref": ref, "force": force}))

    def image_prune(self) -> wire.ImagePruned:
        return cast("wire.ImagePruned", self.json("POST", "/v1/images/prune"))

    # -- exposed ports, the gateway's certificates ----------------------------------------
    def expose(self, ref: str, port: int, public: bool = False) -> wire.ExposedPort:
        body = {"port": port, "public": public}
        return cast("wire.ExposedPort", self.json("POST", paths.sandbox(ref) + "/ports", json=body))

    def ports(self, ref: str) -> builtins.list[wire.ExposedPort]:
        return cast("builtins.list[wire.ExposedPort]", self.json("GET", paths.sandbox(ref) + "/ports"))

    def unexpose(self, ref: str, port: int) -> wire.Unexposed:
        return cast("wire.Unexposed", self.json("DELETE", paths.sandbox(ref) + f"/ports/{int(port)}"))

    def issue_certificate(self, name: str, **req: Any) -> wire.CertificateIssued:
        body = {"name": name, **{k: v for k, v in req.items() if v is not None}}
        return cast("wire.CertificateIssued", self.json("POST", "/v1/gateway/certificates", json=body))

    def certificates(self) -> builtins.list[wire.CertificateRecord]:
        return cast("builtins.list[wire.CertificateRecord]", self.json("GET", "/v1/gateway/certificates"))

    def revoke_certificate(self, ref: str) -> builtins.list[wire.CertificateRecord]:
        return cast("builtins.list[wire.CertificateRecord]", self.json("DELETE", paths.certificate(ref)))

    def ui_link(self) -> wire.UiLink:
        """A one-time link that logs a browser into the dashboard as this client's caller."""
        return cast("wire.UiLink", self.json("POST", "/v1/ui/links"))
