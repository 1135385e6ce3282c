"""Placeholder secrets in a spec: which hosts a secret's placeholder is replaced for.

``--secret TOKEN --secret-host TOKEN=api.example.com`` gives the workload a placeholder
(``hutch-secret-TOKEN-<random>``) instead of the value; the egress proxy puts the value in
requests to ``api.example.com`` only (providers/local/placeholders.py). A host uses
``--allow-host``'s grammar (a name or ``*.suffix``) and must be one the sandbox's network
policy allows: that is checked at create (:func:`check_bindings`), where the values are
present; the stored record keeps names and hosts, never a value.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from hutch.checks import MAX_ITEMS, SECRET_NAME_RE, check_count
from hutch.errors import InvalidError
from hutch.netpolicy import NetworkPolicy, host_matches, normalize_host

MAX_HOSTS = 64  # hosts one secret is bound to


class PlaceholderFields(BaseModel):
    """The placeholder part of a sandbox spec (:class:`hutch.models.SandboxSpec` has it)."""

    secret_hosts: dict[str, list[str]] = Field(default_factory=dict)  # secret -> hosts its value goes to
    secret_body: list[str] = Field(default_factory=list)  # ... in request bodies too, not only headers
    no_intercept: list[str] = Field(default_factory=list)  # hosts whose HTTPS is relayed unopened

    @field_validator("secret_hosts")
    @classmethod
    def _secret_hosts(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        check_count(v, MAX_ITEMS, "placeholder secrets")
        out: dict[str, list[str]] = {}
        for name, hosts in v.items():
            if SECRET_NAME_RE.fullmatch(name) is None:
                raise InvalidError(f"invalid secret name {name!r} in --secret-host", hint="use --secret-host NAME=HOST")
            if not hosts:
                raise InvalidError(f"--secret-host {name} names no host", hint=f"use --secret-host {name}=api.example.com")
            check_count(hosts, MAX_HOSTS, f"hosts of secret {name}")
            out[name] = sorted({normalize_host(h, pattern=True) for h in hosts})
        return out

    @field_validator("no_intercept")
    @classmethod
    def _no_intercept(cls, v: list[str]) -> list[str]:
        check_count(v, MAX_ITEMS, "--no-intercept hosts")
        return sorted({normalize_host(h, pattern=True) for h in v})

    @model_validator(mode="after")
    def _body(self) -> Any:
        for name in self.secret_body:
            if name not in self.secret_hosts:
                raise InvalidError(
                    f"--secret-body {name}: {name} is not bound to a host",
                    hint=f"add --secret-host {name}=HOST (the body is replaced only for its hosts)",
                )
        self.secret_body = sorted(set(self.secret_body))
        return self


def host_allowed(pattern: str, policy: NetworkPolicy) -> bool:
    """Does ``policy`` let the sandbox reach every host ``pattern`` names?"""
    if policy.mode == "none":
        return False
    if any(_within(pattern, denied) for denied in policy.deny_hosts):
        return False
    if policy.mode == "open":
        return True
    return any(_within(pattern, allowed) for allowed in policy.allow_hosts)


def _within(pattern: str, allowed: str) -> bool:
    """Every name ``pattern`` matches is matched by ``allowed``."""
    if not pattern.startswith("*."):
        return host_matches(pattern, allowed)
    return allowed.startswith("*.") and (pattern == allowed or pattern[1:].endswith(allowed[1:]))


def check_bindings(secret_hosts: dict[str, list[str]], secrets: dict[str, str], policy: NetworkPolicy) -> None:
    """At create: each bound secret has a value, and each host is one the policy allows."""
    for name, hosts in secret_hosts.items():
        if name not in secrets:
            raise InvalidError(
                f"unknown secret {name}: --secret-host names a secret this sandbox is not given",
                hint=f"add --secret {name} (its value from ${name}, env:VAR or file:PATH)",
            )
        if not secrets[name]:
            raise InvalidError(f"secret {name} has no value", hint=f"give its value: --secret {name}=env:VAR or file:PATH")
        for host in hosts:
            if not host_allowed(host, policy):
                raise InvalidError(
                    f"--secret-host {name}={host}: the sandbox's network does not allow {host}",
                    hint=f"add --allow-host {host} (a placeholder is only replaced for hosts the sandbox may reach)",
                )
