"""A spec written back as a manifest: ``hutch manifest show FILE|SANDBOX``, whose output
``hutch create --manifest`` takes again. Secrets appear as the references they were read
from (never values); environment values a record does not keep (they may be secrets) become
``pass_env`` names, read from the environment of the create that uses the output."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import TYPE_CHECKING, Any

from hutch.units import format_size

if TYPE_CHECKING:
    from hutch import wire

REDACTED = "***"  # what a record holds for an environment value
BARE = re.compile(r"[A-Za-z0-9_-]+")
DEFAULT_WORKDIR = "/workspace"


def manifest_of(spec: wire.SandboxSpec) -> dict[str, Any]:
    """The manifest keys that make ``spec`` again (defaults left out)."""
    out: dict[str, Any] = {"version": 1}
    for key in ("name", "provider", "image", "runtime", "user", "tenant"):
        if spec.get(key):
            out[key] = spec.get(key)
    if spec.get("workdir") and spec.get("workdir") != DEFAULT_WORKDIR:
        out["workdir"] = spec.get("workdir")
    if spec.get("host_ca"):
        out["host_ca"] = True
    options = spec.get("provider_options") or {}
    if options.get("metro"):
        out["unikraft_metro"] = options["metro"]
    if options.get("ssh") == "true":
        out["ssh"] = True
    for key in ("placement", "node"):  # a cluster's
        if options.get(key):
            out[key] = options[key]
    for key in ("ttl", "idle_timeout"):
        value = spec.get(key)
        if value:
            out[key] = value
    if spec.get("on_expire") == "pause":
        out["on_expire"] = "pause"
    if spec.get("require_approval"):
        out["require_approval"] = list(spec.get("require_approval") or [])
    if spec.get("setup"):
        out["setup"] = list(spec.get("setup") or [])
    limits = {k: v for k, v in (spec.get("limits") or {}).items() if v is not None}
    out["limits"] = {k: format_size(v) if k in ("memory", "disk") and isinstance(v, int) else v for k, v in limits.items()}
    env = spec.get("env") or {}
    passed = sorted(k for k, v in env.items() if v == REDACTED)
    if passed:
        out["pass_env"] = passed
    kept = {k: v for k, v in env.items() if v != REDACTED}
    if kept:
        out["env"] = kept
    if spec.get("labels"):
        out["labels"] = dict(spec.get("labels") or {})
    sources = dict(spec.get("secret_sources") or {})
    secrets = {name: sources.get(name, f"env:{name}") for name in sorted({*sources, *(spec.get("secret_names") or [])})}
    if secrets:
        out["secrets"] = secrets
    bound = spec.get("secret_hosts") or {}
    if bound:
        out["secret_hosts"] = {name: list(hosts) for name, hosts in bound.items()}
    for key, value in (("secret_body", spec.get("secret_body")), ("no_intercept", spec.get("no_intercept"))):
        if value:
            out[key] = list(value)
    net = spec.get("network") or {}
    network: dict[str, Any] = {"mode": net.get("mode", "none")}
    for to, value in (("hosts", net.get("allow_hosts")), ("ports", net.get("ports")), ("cidrs", net.get("cidrs"))):
        if value:
            network[to] = list(value)
    out["network"] = network
    git = spec.get("git")
    if git:
        table: dict[str, Any] = {"repo": git["url"]}
        if git.get("ref"):
            table["ref"] = git.get("ref")
        depth = git.get("depth", 1)
        table["depth"] = "full" if depth is None else depth
        for key in ("secret", "username"):
            if git.get(key):
                table[key] = git.get(key)
        size = git.get("max_size")
        if size:
            table["max_size"] = format_size(size) if isinstance(size, int) else size
        out["git"] = table
    if spec.get("mounts"):
        out["mounts"] = [
            {"source": m["source"], "target": m["target"], "readonly": bool(m.get("readonly"))} for m in spec["mounts"]
        ]
    if spec.get("files"):
        out["files"] = [_file(f) for f in spec.get("files") or []]
    return out


def _file(f: wire.SeedFile) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": f["path"]}
    try:
        data = base64.b64decode(f["content"], validate=True)
        entry["content"] = data.decode()
    except (binascii.Error, ValueError):
        entry["content_base64"] = f["content"]
    entry["mode"] = f"{f.get('mode', 0o644):o}"
    return entry


# -- TOML out (the few types a manifest has) ------------------------------------------------


def _key(key: str) -> str:
    return key if BARE.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def dumps(doc: dict[str, Any], comment: str = "") -> str:
    """``doc`` as TOML: scalars and arrays first, then tables, then arrays of tables."""
    lines = [f"# {line}" for line in comment.splitlines()]
    tables = {k: v for k, v in doc.items() if isinstance(v, dict)}
    many = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)}
    for key, value in doc.items():
        if key not in tables and key not in many:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, table in tables.items():
        lines += ["", f"[{_key(key)}]", *(f"{_key(k)} = {_value(v)}" for k, v in table.items())]
    for key, items in many.items():
        for item in items:
            lines += ["", f"[[{_key(key)}]]", *(f"{_key(k)} = {_value(v)}" for k, v in item.items())]
    return "\n".join(lines) + "\n"
