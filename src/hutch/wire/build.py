"""The request bodies every edge sends, built in one place: the CLI, the SDK and the MCP
server call these functions and never write a spec or an exec request by hand.

Standard library only (no pydantic: the CLI's import budget). The daemon validates what
arrives (hutch.models); here is only what the edges must decide themselves: defaults from
the caller's settings, host paths made absolute on the caller's machine, stdin encoded,
and the network rules that need a mode.
"""

from __future__ import annotations

import os

from hutch.casts import cast
from hutch.errors import InvalidError

TYPE_CHECKING = False  # typing, collections and base64 stay out of the plain CLI paths' start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Literal, Unpack

    from hutch.wire.buildtypes import ExecOptions, Shape, SpecDefaults
    from hutch.wire.oneshot import RunOnceRequest, UploadFile
    from hutch.wire.runs import AttachStart, ExecRequest
    from hutch.wire.sandboxes import (
        GitSource,
        Limits,
        Mount,
        NetworkMode,
        NetworkPolicy,
        OnExpire,
        PolicyChange,
        SandboxSpec,
        SeedFile,
        SubagentRequest,
        WorkspaceView,
    )
    from hutch.wire.system import ApprovalRequest

__all__ = [
    "LOGIN_SHELL",
    "ExecOptions",
    "Shape",
    "SpecDefaults",
    "approval_request",
    "attach_start",
    "exec_request",
    "git_depth",
    "git_source",
    "limits",
    "mount",
    "network_policy",
    "policy_change",
    "run_once_request",
    "sandbox_spec",
    "secret_binding",
    "subagent_request",
    "with_stdin",
]
GIT_USER = "x-access-token"  # the user name sent with a git token when none is given

LOGIN_SHELL = ["/bin/sh", "-c", "command -v bash >/dev/null && exec bash -l || exec sh -l"]  # hutch shell, sbx.pty()


def limits(
    defaults: SpecDefaults,
    memory: int | str | None = None,
    pids: int | None = None,
    cpus: float | None = None,
    disk: int | str | None = None,
) -> Limits:
    """Limits as given, the caller's settings for the rest."""
    out: Limits = {
        "memory": memory or defaults.memory,
        "pids": pids if pids is not None else defaults.pids,
        "cpus": cpus if cpus is not None else defaults.cpus,
    }
    if disk is not None:
        out["disk"] = disk
    return out


def mount(value: str | Mount, flag: str = "mount") -> Mount:
    """``HOST:SANDBOX`` or ``HOST:SANDBOX:ro`` (the host path made absolute here), or a mount as is."""
    if isinstance(value, dict):
        return value
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise InvalidError(f"invalid {flag} {value!r}", hint="use HOST:SANDBOX or HOST:SANDBOX:ro")
    source = os.path.abspath(os.path.expanduser(parts[0]))
    return {"source": source, "target": parts[1], "readonly": len(parts) == 3 and parts[2] == "ro"}


def network_policy(
    mode: str | None, allow_hosts: Iterable[str] = (), ports: Iterable[int] = (), cidrs: Iterable[str] = ()
) -> NetworkPolicy:
    """A new sandbox's policy: allow rules without a mode mean an allowlist. The daemon checks
    the hosts, ports and CIDRs themselves."""
    hosts, port_list, cidr_list = list(allow_hosts), list(ports), list(cidrs)
    has_rules = bool(hosts or port_list or cidr_list)
    chosen = mode or ("allowlist" if has_rules else "none")
    if chosen == "none" and has_rules:
        raise InvalidError(
            "--allow-host, --allow-port and --allow-cidr need a network, but --network none was given",
            hint="use --network allowlist with them, or drop them",
        )
    return {"mode": _mode(chosen), "allow_hosts": hosts, "ports": port_list, "cidrs": cidr_list}


def _mode(mode: str) -> NetworkMode:
    if mode not in ("none", "allowlist", "open"):
        raise InvalidError(f"unknown network mode {mode!r}", hint="use none, allowlist or open")
    return cast("NetworkMode", mode)


def git_source(
    url: str | GitSource,
    *,
    depth: int | str | None = 1,
    secret: str | None = None,
    username: str | None = None,
    max_size: int | str | None = None,
    base: str | None = None,
) -> GitSource:
    """``URL[#REF]`` as a workspace source: a local path (relative: to ``base`` or the current
    directory) made an absolute ``file://`` URL here, on the caller's machine. A URL with a
    password (or a token as its user) in it is refused: credentials come from a secret."""
    if isinstance(url, dict):
        return url
    text, _, ref = url.partition("#")
    if not text:
        raise InvalidError(f"invalid --git-repo {url!r}", hint="use URL[#REF], e.g. https://git.example.com/org/repo.git#main")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme == "file" or (not scheme and ":" not in text.split("/", 1)[0]):
        path = text.removeprefix("file://") if scheme else text
        text = "file://" + os.path.abspath(os.path.join(base or os.getcwd(), os.path.expanduser(path)))
    elif scheme not in ("https", "http", "ssh", "git") and scheme:
        raise InvalidError(f"unsupported git URL scheme {scheme!r}", hint="use https://, http://, git://, ssh:// or a path")
    elif not scheme:
        raise InvalidError(
            f"invalid --git-repo {url!r}: scp-like HOST:PATH addresses are not supported",
            hint="use https://HOST/PATH (with --git-secret for a token), or a local path",
        )
    check_git_url(text)
    source: GitSource = {"url": text, "ref": ref or None, "depth": git_depth(depth)}
    if secret:
        source["secret"] = secret
    if username:
        source["username"] = username
    if max_size is not None:
        source["max_size"] = max_size
    return source


def check_git_url(url: str) -> None:
    """Refuse a URL carrying credentials (``https://user:token@host/...`` or a token as the user)."""
    from urllib.parse import urlsplit

    if url.startswith("file://"):
        return
    parts = urlsplit(url)
    if parts.password is not None or (parts.username and parts.scheme in ("http", "https")):
        shown = url.replace(parts.netloc, "***@" + (parts.hostname or ""), 1)
        raise InvalidError(
            f"a git URL with credentials in it is refused ({shown}): they would land in argv, .git/config and events",
            hint="drop them from the URL and give the token as a secret: --secret GIT_TOKEN=env:VAR --git-secret GIT_TOKEN",
        )
    if not parts.hostname:
        raise InvalidError(f"git URL {url!r} has no host", hint="e.g. https://git.example.com/org/repo.git")


def git_depth(depth: int | str | None) -> int | None:
    """``--git-depth``: a count of commits, or ``full`` (None) for the whole history."""
    if depth is None or depth == "full":
        return None
    try:
        n = int(depth)
    except (TypeError, ValueError):
        n = 0
    if isinstance(depth, bool) or not 1 <= n <= 1 << 20:
        raise InvalidError(f"invalid git depth {depth!r}", hint="give a number of commits (1 or more), or full")
    return n


def seed_file(path: str, data: bytes, mode: int = 0o644) -> SeedFile:
    """A file written into a new sandbox at create (base64 in the JSON)."""
    return {"path": path, "content": _b64(data), "mode": mode}


def _b64(data: bytes) -> str:
    import base64  # here: only a body with bytes in it needs it

    return base64.b64encode(data).decode()


def _shape(defaults: SpecDefaults, shape: Shape) -> tuple[Limits, dict[str, str], dict[str, str]]:
    """The limits, environment and labels ``shape`` gives."""
    given = limits(defaults, shape.get("memory"), shape.get("pids"), shape.get("cpus"), shape.get("disk"))
    return given, dict(shape.get("env") or {}), dict(shape.get("labels") or {})


def _rules(shape: Shape) -> tuple[list[str], list[int], list[str]]:
    """The network allow rules ``shape`` gives: hosts, ports, CIDRs."""
    return list(shape.get("allow_hosts", ())), list(shape.get("allow_ports", ())), list(shape.get("allow_cidrs", ()))


def sandbox_spec(
    defaults: SpecDefaults,
    *,
    name: str | None = None,
    provider: str | None = None,
    mounts: Iterable[str | Mount] = (),
    mount_flag: str = "mount",
    workdir: str | None = None,
    secrets: Mapping[str, str] | None = None,
    tenant: str | None = None,
    reuse_key: str | None = None,
    image: str | None = None,
    user: str | None = None,
    host_ca: bool = False,
    runtime: str | None = None,
    metro: str | None = None,
    ssh: bool = False,
    placement: str | None = None,
    node: str | None = None,
    ttl: float | str | None = None,
    idle_timeout: float | str | None = None,
    on_expire: str | None = None,
    require_approval: Sequence[str] = (),
    secret_hosts: Iterable[str] | Mapping[str, Sequence[str]] = (),
    secret_body: Iterable[str] = (),
    no_intercept: Iterable[str] = (),
    secret_sources: Mapping[str, str] | None = None,
    files: Iterable[SeedFile] = (),
    setup: Iterable[str | Sequence[str]] = (),
    git: str | GitSource | None = None,
    **shape: Unpack[Shape],
) -> SandboxSpec:
    """The body of create (and of ``POST /v1/sessions``: with ``tenant`` or ``reuse_key``).
    ``secret_hosts`` (``NAME=HOST`` items or a mapping) makes those secrets placeholders.
    ``secret_sources`` says where each secret was read (never a value: a manifest of the
    sandbox names them); ``files``, ``setup`` and ``git`` are done once, at create."""
    given, env, labels = _shape(defaults, shape)
    spec: SandboxSpec = {
        "provider": provider or defaults.provider,
        "limits": given,
        "env": env,
        "labels": labels,
        "mounts": [mount(m, mount_flag) for m in mounts],
        "network": network_policy(shape.get("network"), *_rules(shape)),
        "secrets": dict(secrets or {}),
    }
    if name:
        spec["name"] = name
    if workdir:
        spec["workdir"] = workdir
    if tenant:
        spec["tenant"] = tenant
    if reuse_key:
        spec["reuse_key"] = reuse_key
    image = image or defaults.default_image(spec["provider"])
    if image:
        spec["image"] = image
    if user:
        spec["user"] = user
    if host_ca:
        spec["host_ca"] = True
    runtime = runtime or defaults.default_runtime(spec["provider"])
    if runtime:
        spec["runtime"] = cast("Literal['bwrap', 'gvisor']", runtime)  # the daemon checks the value
    options = ({"metro": metro} if metro else {}) | ({"ssh": "true"} if ssh else {})
    options |= ({"placement": placement} if placement else {}) | ({"node": node} if node else {})  # a cluster's
    if options:
        spec["provider_options"] = options
    if ttl:
        spec["ttl"] = ttl
    if idle_timeout:
        spec["idle_timeout"] = idle_timeout
    if on_expire:
        spec["on_expire"] = cast("OnExpire", on_expire)
    if require_approval:
        spec["require_approval"] = list(require_approval)
    bound = secret_binding(secret_hosts)
    if bound:
        spec["secret_hosts"] = bound
    if body := sorted(set(secret_body)):
        spec["secret_body"] = body
    if exempt := list(no_intercept):
        spec["no_intercept"] = exempt
    if secret_sources:
        spec["secret_sources"] = dict(secret_sources)
    seeds = list(files)
    if seeds:
        spec["files"] = seeds
    commands = [c if isinstance(c, str) else list(c) for c in setup]
    if commands:
        spec["setup"] = commands
    if git:
        spec["git"] = git_source(git)
    return spec


def secret_binding(items: Iterable[str] | Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """``--secret-host NAME=HOST`` items (repeatable, also ``NAME=HOST1,HOST2``) as secret -> hosts."""
    if not isinstance(items, str) and hasattr(items, "items"):  # a mapping
        return {name: [hosts] if isinstance(hosts, str) else list(hosts) for name, hosts in items.items()}
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, hosts = item.partition("=")
        if not sep or not name or not hosts:
            raise InvalidError(f"invalid --secret-host {item!r}", hint="use NAME=HOST, e.g. --secret-host TOKEN=api.example.com")
        out.setdefault(name, []).extend(h for h in hosts.split(",") if h)
    return out


def subagent_request(
    defaults: SpecDefaults,
    *,
    name: str | None = None,
    workspace: str | None = None,
    ttl: float | str | None = None,
    **shape: Unpack[Shape],
) -> SubagentRequest:
    """A sub-agent: its own limits (the caller's settings for unset ones); the parent's network
    unless one is given."""
    given, env, labels = _shape(defaults, shape)
    req: SubagentRequest = {"limits": given, "env": env, "labels": labels}
    if name is not None:
        req["name"] = name
    if workspace is not None:
        req["workspace"] = cast("WorkspaceView", workspace)
    if ttl is not None:
        req["ttl"] = ttl
    hosts, ports, cidrs = _rules(shape)
    network = shape.get("network")
    if network or hosts or ports or cidrs:
        req["network"] = network_policy(network, hosts, ports, cidrs)
    return req


def exec_request(command: str | Sequence[str], *, background: bool = False, **options: Unpack[ExecOptions]) -> ExecRequest:
    """The body of exec (and, with :func:`attach_start`, of an interactive run). ``stdin`` travels
    base64-encoded; unset keys take the daemon's defaults."""
    req: ExecRequest = {
        "command": command if isinstance(command, str) else list(command),
        "env": dict(options.get("env") or {}),
        "cwd": options.get("cwd"),
        "timeout": options.get("timeout"),
        "idle_timeout": options.get("idle_timeout"),
    }
    max_output, stdin, secrets = options.get("max_output"), options.get("stdin"), options.get("secrets")
    if max_output is not None:
        req["max_output"] = max_output
    if stdin is not None:
        req = with_stdin(req, stdin.encode() if isinstance(stdin, str) else stdin)
    if background:
        req["background"] = True
    if secrets:
        req["secrets"] = dict(secrets)
    if not options.get("redact", True):
        req["redact"] = False
    approval, user = options.get("approval"), options.get("user")
    if approval:
        req["approval"] = approval
    if user is not None:
        req["user"] = user
    return req


def with_stdin(req: ExecRequest, data: bytes) -> ExecRequest:
    """``req`` with ``data`` as the command's whole standard input (base64 in the JSON)."""
    return {**req, "stdin": _b64(data), "stdin_base64": True}


def run_once_request(
    exec_req: ExecRequest,
    *,
    spec: SandboxSpec | None = None,
    sandbox: str | None = None,
    keep: bool = False,
    pull: bool = False,
    files: Iterable[tuple[str, bytes, int]] = (),
) -> RunOnceRequest:
    """The body of hutch run (``POST /v1/run``): the command, in a new sandbox (``spec``; with a
    tenant or reuse key, the kept one of that line) or in ``sandbox``; ``files`` (path, bytes,
    mode) written before it; ``keep`` the sandbox it makes, ``pull`` the workspace back."""
    if (spec is None) == (sandbox is None):
        raise InvalidError("hutch run needs a spec for a new sandbox, or a sandbox, not both", hint="hutch run -- CMD")
    req: RunOnceRequest = {"exec": exec_req, "keep": keep, "pull": pull}
    if spec is not None:
        req["spec"] = spec
    if sandbox is not None:
        req["sandbox"] = sandbox
    uploads: list[UploadFile] = [{"path": p, "data": _b64(d), "mode": m} for p, d, m in files]
    if uploads:
        req["files"] = uploads
    return req


def attach_start(req: ExecRequest, *, tty: bool, rows: int, cols: int) -> AttachStart:
    """The first message of the attach WebSocket: ``req`` with a terminal's size."""
    return {"type": "start", **req, "tty": tty, "rows": rows, "cols": cols}


def policy_change(
    mode: str | None = None,
    allow_hosts: Sequence[str] | None = None,
    deny_hosts: Sequence[str] | None = None,
    remove_hosts: Sequence[str] | None = None,
    ports: Sequence[int] | None = None,
    cidrs: Sequence[str] | None = None,
    remove_ports: Sequence[int] | None = None,
    remove_cidrs: Sequence[str] | None = None,
) -> PolicyChange:
    """What to change in a live sandbox's policy; empty when nothing is (then only show it)."""
    change: PolicyChange = {}
    if mode:
        change["mode"] = _mode(mode)
    if allow_hosts:
        change["allow_hosts"] = list(allow_hosts)
    if deny_hosts:
        change["deny_hosts"] = list(deny_hosts)
    if remove_hosts:
        change["remove_hosts"] = list(remove_hosts)
    if ports:
        change["ports"] = list(ports)
    if cidrs:
        change["cidrs"] = list(cidrs)
    if remove_ports:
        change["remove_ports"] = list(remove_ports)
    if remove_cidrs:
        change["remove_cidrs"] = list(remove_cidrs)
    return change


def approval_request(
    action: str, sandbox: str | None = None, reason: str | None = None, timeout: float | None = None
) -> ApprovalRequest:
    return {"action": action, "sandbox": sandbox, "reason": reason, "timeout": timeout}


def __getattr__(name: str) -> object:
    """The builder's argument types (typing's classes, so loaded only when named)."""
    if name in ("ExecOptions", "Shape", "SpecDefaults"):
        from hutch.wire import buildtypes

        return getattr(buildtypes, name)
    raise AttributeError(f"module 'hutch.wire.build' has no attribute {name!r}")
