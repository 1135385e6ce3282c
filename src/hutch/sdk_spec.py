"""What the SDK sends: sandbox specs and exec requests built from keyword arguments."""

from __future__ import annotations

import base64
import os
from typing import Any

from hutch.config import Settings
from hutch.errors import InvalidError
from hutch.models import NetworkPolicy


def _spec(**kw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        k: v
        for k, v in kw.items()
        if k in ("name", "env", "labels", "workdir", "provider", "ttl", "idle_timeout", "on_expire", "require_approval", "image")
        and v is not None
    }
    if kw.get("unikraft_metro"):
        spec["provider_options"] = {"metro": kw["unikraft_metro"]}
    limits = {k: kw[k] for k in ("memory", "pids", "cpus") if kw.get(k) is not None}
    if limits:
        spec["limits"] = limits
    if kw.get("mounts"):
        spec["mounts"] = [_mount(m) for m in kw["mounts"]]
    if kw.get("network") or kw.get("allow_hosts") or kw.get("allow_ports") or kw.get("allow_cidrs"):
        policy = NetworkPolicy.build(
            kw.get("network"), kw.get("allow_hosts") or (), kw.get("allow_ports") or (), kw.get("allow_cidrs") or ()
        )
        spec["network"] = policy.model_dump(mode="json")
    if kw.get("secrets"):
        spec["secrets"] = dict(kw["secrets"])
    return spec


def _mount(m: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(m, dict):
        return m
    parts = m.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise InvalidError(f"invalid mount {m!r}", hint="use HOST:SANDBOX or HOST:SANDBOX:ro")
    source = os.path.abspath(os.path.expanduser(parts[0]))
    return {"source": source, "target": parts[1], "readonly": len(parts) > 2 and parts[2] == "ro"}


def _with_defaults(spec: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Unset limits come from Settings (HUTCH_MEMORY, config.toml ...), as in the CLI."""
    limits = {"memory": settings.memory, "pids": settings.pids, "cpus": settings.cpus} | spec.get("limits", {})
    return spec | {"limits": limits}


def _exec_req(
    command: str | list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    timeout: float | None,
    stdin: bytes | str | None,
    max_output: int | None,
    idle_timeout: float | None = None,
    background: bool = False,
    secrets: dict[str, str] | None = None,
    redact: bool = True,
    approval: str | None = None,
) -> dict[str, Any]:
    req: dict[str, Any] = {"command": command, "env": env or {}, "cwd": cwd, "timeout": timeout}
    req |= {"idle_timeout": idle_timeout, "background": background, "secrets": secrets or {}, "redact": redact}
    if approval:
        req["approval"] = approval
    if stdin is not None:
        raw = stdin.encode() if isinstance(stdin, str) else stdin
        req |= {"stdin": base64.b64encode(raw).decode(), "stdin_base64": True}
    if max_output is not None:
        req["max_output"] = max_output
    return req


def _policy_change(
    network: str | None,
    allow_hosts: list[str] | None,
    deny_hosts: list[str] | None,
    remove_hosts: list[str] | None,
    ports: list[int] | None,
    cidrs: list[str] | None,
) -> dict[str, Any]:
    change: dict[str, Any] = {"mode": network, "allow_hosts": allow_hosts, "deny_hosts": deny_hosts}
    change |= {"remove_hosts": remove_hosts, "ports": ports, "cidrs": cidrs}
    return {k: v for k, v in change.items() if v}


def _subagent_req(**kw: Any) -> dict[str, Any]:
    spec = _spec(**kw)
    spec.pop("provider", None)
    spec.pop("workdir", None)
    if kw.get("workspace") is not None:
        spec["workspace"] = kw["workspace"]
    return spec
