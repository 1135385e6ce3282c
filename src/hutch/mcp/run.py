"""The MCP server's ``run`` tool: hutch run in one call (a sandbox made, a local directory
pushed, one command, the directory pulled back, the sandbox destroyed), over
:meth:`hutch.client.AsyncClient.run_once`. Registered by :func:`hutch.mcp.server.build_server`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from hutch.client.oneshot import Outcome
from hutch.manifest.load import spec_args
from hutch.mcp.shapes import (
    MAX_CALL_OUTPUT,
    Body,
    Command,
    GitRepo,
    ManifestPath,
    MaxOutput,
    Network,
    SecretHosts,
    SecretNames,
    _call,
    cap_output,
    env_secrets,
)
from hutch.wire import build

if TYPE_CHECKING:
    from hutch.client import AsyncClient
    from hutch.config import Settings
    from hutch.mcp.server import HutchMCP

Local = Annotated[
    str | None,
    Field(description="A directory on the machine running this MCP server, pushed into /workspace before the command."),
]


def register(app: HutchMCP, client: AsyncClient, settings: Settings, default_cap: int) -> None:
    @app.tool(name="run", annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def run_(
        command: Command,
        directory: Local = None,
        pull: Annotated[bool, Field(description="Copy /workspace back into `directory` after the command.")] = False,
        keep: Annotated[bool, Field(description="Keep the sandbox afterwards (its id is in the result).")] = False,
        memory: Annotated[str | None, Field(description="Memory limit, e.g. '512M', '1G' (default 1G).")] = None,
        pids: Annotated[int | None, Field(ge=1, description="Maximum number of processes (default 512).")] = None,
        env: Annotated[dict[str, str] | None, Field(description="Environment variables for the command.")] = None,
        network: Annotated[Network | None, Field(description="none (default), allowlist or open.")] = None,
        allow_hosts: Annotated[list[str] | None, Field(description="Hosts it may reach: 'pkg.example', '*.github.com'.")] = None,
        timeout: Annotated[
            float | None, Field(gt=0, description="Wall timeout in seconds; the whole process tree is killed (exit 124).")
        ] = None,
        stdin: Annotated[str | None, Field(description="Text fed to the command's standard input.")] = None,
        max_output: MaxOutput = None,
        image: Annotated[
            str | None,
            Field(description="Image to run in (e.g. 'python:3.12-slim'; see image_list): a writable root of its own."),
        ] = None,
        secrets: SecretNames = None,
        secret_hosts: SecretHosts = None,
        manifest: ManifestPath = None,
        git_repo: GitRepo = None,
    ) -> CallToolResult:
        """Run one command in a new sandbox and destroy it: exit_code, status, stdout and stderr, as exec.

        With `directory`, that local tree is pushed into /workspace first, and with `pull` the workspace
        comes back into it afterwards (files the command changed overwrite the local ones). The sandbox
        is destroyed however the run ends, unless `keep`. For several commands in one sandbox use
        sandbox_create and exec instead."""
        cap = max_output or default_cap

        async def work() -> Body:
            flags = dict(
                memory=memory,
                pids=pids,
                env=env,
                network=network,
                allow_hosts=allow_hosts or (),
                image=image,
                secrets=env_secrets(secrets),
                secret_hosts=secret_hosts or {},
                git=build.git_source(git_repo) if git_repo else None,
            )
            spec = build.sandbox_spec(settings, **spec_args(manifest, flags))
            exec_req = build.exec_request(command, timeout=timeout, stdin=stdin, max_output=cap)
            req = build.run_once_request(exec_req, spec=spec, keep=keep, pull=pull and bool(directory))
            outcome = Outcome(cap)
            answer = await client.run_once(req, sync=directory)
            try:
                async for frame in answer:
                    outcome.add(frame)
            finally:
                await answer.aclose()
            out = cap_output(outcome.result(), cap)
            out["destroyed"] = bool(outcome.done.get("destroyed"))
            if answer.pulled is not None:
                out["pulled"] = answer.pulled
            if out.get("truncated") and out["destroyed"]:  # its kept copy went with the sandbox
                out["how_to_get_more"] = (
                    f"only the first {cap} bytes of each stream came back (stdout_bytes/stderr_bytes are the full sizes), "
                    f"and the sandbox is gone: run again with a larger max_output (up to {MAX_CALL_OUTPUT}), or with "
                    "keep=true and page through the output with run_poll, then sandbox_destroy"
                )
            return out

        return await _call(work())
