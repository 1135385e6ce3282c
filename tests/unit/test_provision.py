"""The clone's network (pure): what a remote clone adds to a sandbox's policy, for the clone only."""

from __future__ import annotations

import pytest

from hutch.models import NetworkPolicy
from hutch.seeds import GitSource
from hutch.service.provision import Provision, _clone_env


def policy(**kw: object) -> NetworkPolicy:
    return NetworkPolicy.model_validate(kw)


@pytest.mark.parametrize(
    ("before", "host", "port", "after"),
    [
        ({"mode": "none"}, "git.example.com", 443, {"mode": "allowlist", "allow_hosts": ["git.example.com"], "ports": [443]}),
        (
            {"mode": "allowlist", "allow_hosts": ["pkgs.example.com"]},
            "git.example.com",
            8080,
            {"mode": "allowlist", "allow_hosts": ["git.example.com", "pkgs.example.com"], "ports": [80, 443, 8080]},
        ),
        ({"mode": "allowlist", "allow_hosts": ["*.example.com"]}, "git.example.com", 443, None),
        ({"mode": "allowlist", "allow_hosts": ["git.example.com"], "ports": [22]}, "git.example.com", 443, {"ports": [22, 443]}),
        ({"mode": "open"}, "git.example.com", 8443, None),
        ({"mode": "open", "ports": [443]}, "git.example.com", 8443, {"mode": "open", "ports": [443, 8443]}),
    ],
)
def test_the_clone_opens_only_what_it_needs(
    before: dict[str, object], host: str, port: int, after: dict[str, object] | None
) -> None:
    got = Provision._opening(policy(**before), host, port)
    if after is None:
        assert got is None
        return
    assert got is not None
    for key, value in after.items():
        assert sorted(getattr(got, key)) == sorted(value) if isinstance(value, list) else getattr(got, key) == value  # type: ignore[arg-type]


def test_the_clone_env_carries_no_argv_and_a_commit_is_fetched_by_id() -> None:
    env = _clone_env(GitSource(url="https://git.example.com/a.git", ref="a" * 40, depth=None, secret="T"), "tok")
    assert env["HUTCH_GIT_COMMIT"] == "a" * 40 and env["HUTCH_GIT_REF"] == "" and env["HUTCH_GIT_DEPTH"] == ""
    assert env["HUTCH_GIT_PASSWORD"] == "tok" and env["HUTCH_GIT_USER"] == "x-access-token"
    env = _clone_env(GitSource(url="https://git.example.com/a.git", ref="main"), None)
    assert env["HUTCH_GIT_REF"] == "main" and env["HUTCH_GIT_DEPTH"] == "--depth=1" and env["HUTCH_GIT_PASSWORD"] == ""
