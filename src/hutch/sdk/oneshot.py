"""``Sandbox.run_once`` (and ``AsyncSandbox.run_once``): hutch run from Python. The daemon
does the whole run in one request (make the sandbox, push ``sync``, run, pull, destroy);
here are the request and the result, shared by the sync and the async twin."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal, TypedDict

from hutch.client.oneshot import Outcome
from hutch.errors import InvalidError
from hutch.sdk.results import ExecResult
from hutch.wire.build import SpecDefaults, exec_request, git_source, run_once_request, sandbox_spec

if TYPE_CHECKING:
    from hutch import wire


class CreateOptions(TypedDict, total=False):
    """The arguments of :meth:`hutch.Sandbox.create` (they mean the same for ``run_once``)."""

    name: str | None
    memory: str | int | None
    pids: int | None
    cpus: float | None
    env: dict[str, str] | None
    mounts: list[str] | None
    labels: dict[str, str] | None
    workdir: str | None
    provider: str | None
    network: str | None
    allow_hosts: list[str] | None
    allow_ports: list[int] | None
    allow_cidrs: list[str] | None
    secrets: dict[str, str] | None
    secret_hosts: dict[str, list[str]] | None  # secret -> hosts: the sandbox holds a placeholder, the proxy the value
    secret_body: list[str] | None  # placeholders also replaced in request bodies
    no_intercept: list[str] | None  # hosts whose HTTPS is relayed unopened (placeholders to them unchecked)
    ttl: str | float | None
    idle_timeout: str | float | None
    on_expire: Literal["destroy", "pause"] | None
    require_approval: list[str] | None
    image: str | None
    runtime: Literal["bwrap", "gvisor"] | None
    disk: int | str | None
    unikraft_metro: str | None
    placement: Literal["spread", "pack"] | None  # on a cluster's gateway: how it picks the node
    node: str | None  # on a cluster's gateway: the node to place it on when it has room
    tenant: str | None
    manifest: str | None  # a TOML manifest file ("": ./hutch.toml); the other options win over it
    git_repo: str | None  # URL[#REF]: the workspace starts as a clone of it
    git_depth: int | str | None  # commits of history (default 1), or "full"
    git_secret: str | None  # the secret (of ``secrets``) whose value is the clone's token
    setup: list[str] | None  # commands run once at create, in order


def create_spec(defaults: SpecDefaults, c: CreateOptions) -> wire.SandboxSpec:
    """The spec of a new sandbox from the arguments of :meth:`hutch.Sandbox.create`. An argument
    it does not know is refused (``invalid``), never dropped."""
    unknown = sorted(set(c) - CreateOptions.__optional_keys__)
    if unknown:
        raise InvalidError(
            f"unknown sandbox option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
            hint="the options are: " + ", ".join(sorted(CreateOptions.__optional_keys__)),
        )
    from hutch.manifest.load import spec_args

    repo = c.get("git_repo")
    flags = dict(
        name=c.get("name"),
        memory=c.get("memory"),
        pids=c.get("pids"),
        cpus=c.get("cpus"),
        disk=c.get("disk"),
        env=c.get("env"),
        mounts=c.get("mounts") or (),
        labels=c.get("labels"),
        workdir=c.get("workdir"),
        provider=c.get("provider"),
        network=c.get("network"),
        allow_hosts=c.get("allow_hosts") or (),
        allow_ports=c.get("allow_ports") or (),
        allow_cidrs=c.get("allow_cidrs") or (),
        secrets=c.get("secrets"),
        secret_hosts=c.get("secret_hosts") or {},
        secret_body=c.get("secret_body") or (),
        no_intercept=c.get("no_intercept") or (),
        ttl=c.get("ttl"),
        idle_timeout=c.get("idle_timeout"),
        on_expire=c.get("on_expire"),
        require_approval=c.get("require_approval") or (),
        image=c.get("image"),
        runtime=c.get("runtime"),
        metro=c.get("unikraft_metro"),
        placement=c.get("placement"),
        node=c.get("node"),
        tenant=c.get("tenant"),
        setup=c.get("setup") or (),
        git=git_source(repo, depth=c.get("git_depth") or 1, secret=c.get("git_secret")) if repo else None,
        git_depth=c.get("git_depth"),
        git_secret=c.get("git_secret"),
    )
    spec = sandbox_spec(defaults, **spec_args(c.get("manifest"), flags))
    node = ray_node()
    if node is not None and PREFER_NODE not in spec.get("labels", {}):
        spec["labels"] = {**spec.get("labels", {}), PREFER_NODE: node}
    return spec


PREFER_NODE = "hutch.prefer-node"  # a cluster gateway places the sandbox there when it has room


def ray_node() -> str | None:
    """The address of the Ray node this code runs on, inside a Ray task or actor (None elsewhere):
    a cluster gateway then prefers that node. Ray is never imported here, only looked at."""
    ray = sys.modules.get("ray")
    try:
        if ray is None or not ray.is_initialized():
            return None
        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 (a Ray of another shape: no preference, never a failed create)
        return None


def request(
    defaults: SpecDefaults,
    command: str | list[str],
    *,
    pull: bool,
    keep: bool,
    sandbox: str | None,
    cwd: str | None,
    timeout: float | None,
    stdin: bytes | str | None,
    max_output: int,
    create: CreateOptions,
) -> wire.RunOnceRequest:
    exec_req = exec_request(command, cwd=cwd, timeout=timeout, stdin=stdin, max_output=max_output)
    if sandbox is not None:
        if create:
            raise InvalidError(
                f"{', '.join(sorted(create))}: options of a new sandbox, but run_once was given the sandbox {sandbox}",
                hint="drop them, or drop sandbox= to run in a new one",
            )
        return run_once_request(exec_req, sandbox=sandbox, keep=keep, pull=pull)
    return run_once_request(exec_req, spec=create_spec(defaults, create), keep=keep, pull=pull)


def result(outcome: Outcome) -> ExecResult:
    return ExecResult.from_dict(outcome.result())
