"""The MCP server and its tools, each a few lines over :class:`hutch.client.AsyncClient`
(the run tool is in :mod:`hutch.mcp.run`, the image tools in :mod:`hutch.mcp.images`)."""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from hutch._version import __version__
from hutch.client import AsyncClient
from hutch.config import Settings
from hutch.errors import InternalError, InvalidError
from hutch.manifest.load import spec_args
from hutch.mcp import images, run
from hutch.mcp.shapes import (
    DEFAULT_MAX_OUTPUT,
    Body,
    Command,
    Directory,
    ExecUser,
    GitRepo,
    ManifestPath,
    MaxOutput,
    Network,
    RunId,
    Sandbox,
    SecretHosts,
    SecretNames,
    _call,
    _validation_message,
    cap_output,
    env_secrets,
    error_result,
    file_chunk,
)
from hutch.units import parse_time
from hutch.wire import build

if TYPE_CHECKING:
    from hutch import wire

log = logging.getLogger("hutch.mcp")

INSTRUCTIONS = """\
hutch runs commands in isolated Linux sandboxes (no network, capped memory and processes,
a private /workspace). Create a sandbox once, then exec commands and read/write files in
it; destroy it when done. exec never fails because the command failed: read exit_code and
status. A tool error means hutch itself failed: its error.kind and error.hint say what to
do. Output is capped per stream (see truncated, stdout_bytes, how_to_get_more)."""


class HutchMCP(MCPServer[Any]):
    """MCPServer whose argument errors look like every other hutch error (kind ``invalid``)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:  # a bug, not bad input: still an error of the usual shape
            cause = exc.__cause__ or exc
            log.error("tool %s failed", name, exc_info=cause)
            message = f"{name} failed: {type(cause).__name__}: {cause}"
            return error_result(InternalError(message, hint="see the stderr of hutch mcp, and hutch daemon logs"))
        except ToolError as exc:
            hint = "see the tool's input schema (tools/list)" if self._tool_manager.get_tool(name) else "list the tools"
            return error_result(InvalidError(_validation_message(name, exc), hint=hint))


def build_server(settings: Settings | None = None, max_output: int = DEFAULT_MAX_OUTPUT) -> tuple[HutchMCP, AsyncClient]:
    """The MCP server and the client it speaks through (close it when the server ends)."""
    settings = settings or Settings.load()
    client = AsyncClient(settings)
    default_cap = max_output
    app = HutchMCP("hutch", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))
    async def sandbox_create(
        name: Annotated[str | None, Field(description="Unique name, usable wherever an id is.")] = None,
        memory: Annotated[str | None, Field(description="Memory limit, e.g. '512M', '1G' (default 1G).")] = None,
        pids: Annotated[int | None, Field(ge=1, description="Maximum number of processes (default 512).")] = None,
        cpus: Annotated[float | None, Field(gt=0, description="CPU limit in cores, e.g. 0.5 (default: none).")] = None,
        env: Annotated[dict[str, str] | None, Field(description="Environment variables every command sees.")] = None,
        workdir: Annotated[str | None, Field(description="Default working directory (default /workspace).")] = None,
        network: Annotated[Network | None, Field(description="none (default), allowlist or open.")] = None,
        allow_hosts: Annotated[list[str] | None, Field(description="Hosts it may reach: 'pkg.example', '*.github.com'.")] = None,
        allow_ports: Annotated[list[int] | None, Field(description="Ports it may reach (default 80 and 443).")] = None,
        image: Annotated[
            str | None,
            Field(description="Image to start from (e.g. 'python:3.12-slim'; see hutch image list): a writable root of its own."),
        ] = None,
        secrets: SecretNames = None,
        secret_hosts: SecretHosts = None,
        runtime: Annotated[
            Literal["bwrap", "gvisor"] | None,
            Field(description="How it is isolated: bwrap (default) or gvisor (a user-space kernel: stronger, slower)."),
        ] = None,
        manifest: ManifestPath = None,
        git_repo: GitRepo = None,
    ) -> CallToolResult:
        """Create a sandbox (capped memory and processes, its own /workspace) and return its record.

        Without `image` the sandbox sees the host's /usr read-only; with one it gets that image's files
        under a writable root of its own (apt/pip installs stay in the sandbox), root inside.

        No network unless `allow_hosts` (or network='open') is given: then only through hutch's proxy,
        every connection recorded as an egress_allowed/egress_denied event. A `manifest` (a TOML file
        naming all of these, see docs/manifest.md) can declare everything; the arguments given win over it.
        Use the returned id (or the name) as `sandbox` in the other tools; destroy it when done."""

        async def work() -> wire.SandboxRecord:
            flags = dict(
                name=name,
                memory=memory,
                pids=pids,
                cpus=cpus,
                env=env,
                workdir=workdir,
                network=network,
                allow_hosts=allow_hosts or (),
                allow_ports=allow_ports or (),
                image=image,
                secrets=env_secrets(secrets),
                secret_hosts=secret_hosts or {},
                runtime=runtime,
                git=build.git_source(git_repo) if git_repo else None,
            )
            return await client.create(build.sandbox_spec(settings, **spec_args(manifest, flags)))

        return await _call(work())

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False))
    async def policy_update(
        sandbox: Sandbox,
        network: Annotated[Network | None, Field(description="Switch mode: none, allowlist or open.")] = None,
        allow_hosts: Annotated[list[str] | None, Field(description="Hosts to allow ('*.example.org' for a domain).")] = None,
        deny_hosts: Annotated[list[str] | None, Field(description="Hosts to deny, even in open mode.")] = None,
        allow_ports: Annotated[list[int] | None, Field(description="Ports to allow.")] = None,
    ) -> CallToolResult:
        """Show (no arguments) or change a sandbox's network policy, live: new connections follow it at once.

        When a command fails on the network, read `events` with type egress_denied first: it says which rule."""

        async def work() -> Body:
            change = build.policy_change(network, allow_hosts, deny_hosts, ports=allow_ports)
            rec = await client.policy(sandbox, change) if change else await client.get(sandbox)
            return {"sandbox": rec["id"], "network": rec["spec"]["network"], "egress": rec.get("egress")}

        return await _call(work())

    @app.tool(annotations=read_only)
    async def sandbox_list(
        include_all: Annotated[bool, Field(description="Include destroyed and failed sandboxes.")] = False,
    ) -> CallToolResult:
        """List sandboxes (live ones unless include_all)."""

        async def work() -> Body:
            return {"sandboxes": await client.list(include_all)}

        return await _call(work())

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False))
    async def sandbox_destroy(sandbox: Sandbox) -> CallToolResult:
        """Destroy a sandbox and everything in it. Idempotent: one that is already gone is success."""
        return await _call(client.destroy(sandbox))

    @app.tool(name="exec", annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def exec_(
        sandbox: Sandbox,
        command: Command,
        timeout: Annotated[
            float | None, Field(gt=0, description="Wall timeout in seconds; the whole process tree is killed (exit 124).")
        ] = None,
        env: Annotated[dict[str, str] | None, Field(description="Extra environment variables for this command.")] = None,
        cwd: Annotated[str | None, Field(description="Working directory (default: the sandbox's workdir).")] = None,
        stdin: Annotated[str | None, Field(description="Text fed to the command's standard input.")] = None,
        max_output: MaxOutput = None,
        user: ExecUser = None,
    ) -> CallToolResult:
        """Run a command in a sandbox and wait for it: exit_code, status, stdout and stderr (separate, capped).

        A non-zero exit_code is the command's own result, not a tool error. status is completed, failed,
        timed_out (exit_code 124), killed or oom_killed. stdout/stderr that are not UTF-8 come as base64
        (stdout_base64/stderr_base64 true)."""
        cap = max_output or default_cap
        req = build.exec_request(command, env=env, cwd=cwd, timeout=timeout, stdin=stdin, max_output=cap, user=user)

        async def work() -> Body:
            return cap_output(await client.exec(sandbox, req), cap)

        return await _call(work())

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def file_write(
        sandbox: Sandbox,
        path: Annotated[str, Field(description="Path in the sandbox; relative paths are under its workdir.")],
        content: Annotated[str, Field(description="The file's content: text, or base64 when base64 is true.")],
        base64: Annotated[bool, Field(description="content is base64 (for binary files).")] = False,
        mode: Annotated[str, Field(pattern="^0?[0-7]{3}$", description="File mode, octal 000-777 (default 644).")] = "644",
    ) -> CallToolResult:
        """Write a file into a sandbox (parent directories are created; an existing file is replaced)."""

        async def work() -> Body:
            data = _decode(content) if base64 else content.encode()
            return await client.write_file(sandbox, path, data, int(mode, 8))

        return await _call(work())

    @app.tool(annotations=read_only)
    async def file_read(
        sandbox: Sandbox,
        path: Annotated[str, Field(description="Path in the sandbox; relative paths are under its workdir.")],
        offset: Annotated[int, Field(ge=0, description="Byte offset to start at (for reading a large file in pages).")] = 0,
        max_bytes: MaxOutput = None,
    ) -> CallToolResult:
        """Read a file from a sandbox: text when it is UTF-8, else base64. Large files come in pages
        (truncated, next_offset)."""

        async def work() -> Body:
            limit = max_bytes or default_cap
            data, more, size = await client.read_page(sandbox, path, offset, limit + 3)  # room to end on a whole character
            return file_chunk(path, data, more, size, offset, limit)

        return await _call(work())

    @app.tool(annotations=read_only)
    async def file_list(
        sandbox: Sandbox,
        path: Annotated[str | None, Field(description="Directory to list (default: the sandbox's workdir).")] = None,
    ) -> CallToolResult:
        """List a directory in a sandbox: name, type (file, dir, symlink), size, mode and mtime of each entry."""

        async def work() -> Body:
            return {"path": path, "entries": await client.list_files(sandbox, path)}

        return await _call(work())

    @app.tool(annotations=read_only)
    async def sandbox_diff(
        sandbox: Sandbox,
        since: Annotated[
            str | None,
            Field(description="Only changes at or after this time: a Unix time, ISO 8601, or a duration ago (10m, 2h)."),
        ] = None,
        path: Annotated[str | None, Field(description="Only changes at or under this path (default: everything).")] = None,
    ) -> CallToolResult:
        """What a sandbox changed, like docker diff: the paths added, modified and deleted in its
        writable root (image sandboxes) and its /workspace, judged by ctime (which a workload cannot set back)."""

        async def work() -> Body:
            when = parse_time(since) if since is not None else None
            return await client.diff(sandbox, when, path)

        return await _call(work())

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def exec_background(
        sandbox: Sandbox,
        command: Command,
        timeout: Annotated[float | None, Field(gt=0, description="Wall timeout in seconds (the tree is killed).")] = None,
        idle_timeout: Annotated[
            float | None, Field(gt=0, description="Kill the run when it prints nothing for this many seconds.")
        ] = None,
        env: Annotated[dict[str, str] | None, Field(description="Extra environment variables for this command.")] = None,
        cwd: Annotated[str | None, Field(description="Working directory (default: the sandbox's workdir).")] = None,
        user: ExecUser = None,
    ) -> CallToolResult:
        """Start a command in the background and return its run record at once (id, status running).

        Follow it with run_poll, wait for it with run_wait, stop it with run_kill. Its output is kept
        on disk even if this client goes away."""
        req = build.exec_request(command, env=env, cwd=cwd, timeout=timeout, idle_timeout=idle_timeout, user=user)
        return await _call(client.start(sandbox, req))

    @app.tool(annotations=read_only)
    async def run_poll(
        run_id: RunId,
        stdout_offset: Annotated[int, Field(ge=0, description="Resume stdout from this byte (a previous next_offset).")] = 0,
        stderr_offset: Annotated[int, Field(ge=0, description="Resume stderr from this byte (a previous next_offset).")] = 0,
        max_bytes: MaxOutput = None,
    ) -> CallToolResult:
        """A run's status and the output written so far from the given offsets (stdout/stderr each with
        data, base64, offset, next_offset, size). done is true once it ended and everything was read;
        run.truncated then says the kept output stops at the disk cap (size < run.stdout_bytes)."""
        return await _call(client.output(run_id, stdout_offset, stderr_offset, max_bytes or default_cap))

    @app.tool(annotations=read_only)
    async def run_wait(
        run_id: RunId,
        timeout: Annotated[float | None, Field(gt=0, description="Give up after this many seconds (kind timeout).")] = None,
    ) -> CallToolResult:
        """Wait until a run ends and return its record (status, exit_code, output sizes)."""
        return await _call(client.wait(run_id, timeout))

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False))
    async def run_kill(
        run_id: RunId,
        signal: Annotated[str, Field(description="TERM (default), KILL, INT, HUP, QUIT, USR1, USR2 or a number.")] = "TERM",
    ) -> CallToolResult:
        """Signal a run's whole process tree. Killing a run that already ended succeeds and says so."""
        return await _call(client.kill(run_id, signal))

    @app.tool(annotations=read_only)
    async def logs(
        sandbox: Sandbox,
        run_id: Annotated[str | None, Field(description="Only this run's output.")] = None,
        offset: Annotated[int, Field(ge=0, description="Transcript offset to start at (a previous next_offset).")] = 0,
        max_bytes: MaxOutput = None,
    ) -> CallToolResult:
        """The sandbox's transcript: the output of its runs in the order it arrived, from offset
        (records with run_id, stream, data; next_offset to resume; eof when nothing is running)."""
        return await _call(client.logs(sandbox, run_id, offset, max_bytes or default_cap))

    @app.tool(annotations=read_only)
    async def events(
        sandbox: Sandbox,
        type: Annotated[list[str] | None, Field(description="Only these types, e.g. ['run_finished'].")] = None,  # noqa: A002
        after: Annotated[int, Field(ge=0, description="Only events after this sequence number.")] = 0,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many events.")] = 100,
    ) -> CallToolResult:
        """The sandbox's audit events in order (seq, time, type, run_id, data)."""

        async def work() -> Body:
            return {"events": await client.events(sandbox, types=type, after=after, limit=limit)}

        return await _call(work())

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def push(
        sandbox: Sandbox,
        directory: Directory,
        delete: Annotated[bool, Field(description="Remove files an earlier push sent that are gone locally.")] = False,
        exclude: Annotated[list[str] | None, Field(description="Glob patterns to leave out.")] = None,
        dry_run: Annotated[bool, Field(description="Only say what would be sent and deleted.")] = False,
        force: Annotated[bool, Field(description="Allow a delete of more than 100 files or 20% of the tree.")] = False,
    ) -> CallToolResult:
        """Copy a local tree into the sandbox's /workspace, sending only what changed since the last
        push (git repos: tracked + untracked-not-ignored files). Summary: files_sent, bytes, deleted, skipped."""
        return await _call(client.push(sandbox, directory, delete=delete, exclude=exclude or (), dry_run=dry_run, force=force))

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def pull(
        sandbox: Sandbox,
        directory: Directory,
        dry_run: Annotated[bool, Field(description="Only say what would be written.")] = False,
        force: Annotated[bool, Field(description="Overwrite local files whose content differs.")] = False,
    ) -> CallToolResult:
        """Copy the sandbox's /workspace into a local directory. Refuses (error kind conflict), writing
        nothing, when local files would be overwritten with other content, unless force."""
        return await _call(client.pull(sandbox, directory, dry_run=dry_run, force=force))

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))
    async def snapshot_save(
        sandbox: Sandbox,
        name: Annotated[str, Field(description="The snapshot's unique name (letters, digits, '.', '_', '-').")],
    ) -> CallToolResult:
        """Save the sandbox's workspace (owners, modes, symlinks, xattrs) as a named snapshot: a
        checkpoint before a risky step. Restore it with snapshot_restore."""
        return await _call(client.snapshot_save(sandbox, name))

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))
    async def snapshot_restore(
        snapshot: Annotated[str, Field(description="The snapshot's name (from snapshot_save).")],
        name: Annotated[str | None, Field(description="Name for the new sandbox.")] = None,
    ) -> CallToolResult:
        """Create a new sandbox whose workspace is the snapshot's; returns the new sandbox."""
        return await _call(client.snapshot_restore(snapshot, name))

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))
    async def approval_request(
        sandbox: Sandbox,
        action: Annotated[str, Field(min_length=1, description="What you want to do, e.g. 'push to main'.")],
        reason: Annotated[str | None, Field(description="Why: shown to the human who decides.")] = None,
        timeout: Annotated[float, Field(gt=0, le=7 * 86400, description="Seconds the request stays open.")] = 600,
        wait: Annotated[float, Field(ge=0, le=300, description="Seconds to wait here for the decision (0: return at once).")] = 0,
    ) -> CallToolResult:
        """Ask a human at the host to approve an action, and (with `wait`) wait for the answer.

        Returns the request: `status` is pending, approved, rejected (see decision_reason) or expired.
        Do the action only once it is approved; while pending, call approval_status with its id.
        You cannot approve it yourself: a human runs `hutch approve ID`."""

        async def work() -> Body:
            apr = await client.request_approval(build.approval_request(action, sandbox, reason, timeout))
            return await client.wait_approval(apr["id"], wait) if wait else apr

        return await _call(work())

    @app.tool(annotations=read_only)
    async def approval_status(
        approval_id: Annotated[str, Field(pattern=r"^apr_[0-9a-f]+$", description="The id approval_request returned.")],
        wait: Annotated[float, Field(ge=0, le=300, description="Seconds to wait for a decision (0: at once).")] = 0,
    ) -> CallToolResult:
        """An approval request's status (pending, approved, rejected or expired), waiting up to `wait` seconds."""
        work = client.wait_approval(approval_id, wait) if wait else client.approval(approval_id)
        return await _call(work)

    @app.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False))
    async def port_expose(
        sandbox: Sandbox,
        port: Annotated[int, Field(ge=1, le=65535, description="A port a server listens on inside the sandbox.")],
        public: Annotated[bool, Field(description="Anyone with the URL may open it (default: the URL carries a token).")] = False,
    ) -> CallToolResult:
        """Open a server listening inside the sandbox (e.g. python3 -m http.server 8000) to the outside:
        the answer's url opens it from the user's browser as it is. HTTP and WebSocket."""
        return await _call(client.expose(sandbox, port, public))

    @app.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False))
    async def port_unexpose(
        sandbox: Sandbox, port: Annotated[int, Field(ge=1, le=65535, description="The exposed port.")]
    ) -> CallToolResult:
        """Close an exposed port (its URLs stop working)."""
        return await _call(client.unexpose(sandbox, port))

    run.register(app, client, settings, default_cap)
    images.register(app, client)
    return app, client


def _decode(content: str) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except ValueError as exc:
        raise InvalidError("content is not valid base64", hint="send base64=false for text") from exc


async def serve(settings: Settings, max_output: int = DEFAULT_MAX_OUTPUT, http_port: int | None = None) -> None:
    """Serve MCP over stdio, or over streamable HTTP on 127.0.0.1:``http_port``."""
    app, client = build_server(settings, max_output)
    try:
        if http_port is None:
            await app.run_stdio_async()
        else:
            await app.run_streamable_http_async(host="127.0.0.1", port=http_port)
    finally:
        await client.close()
