"""--git-repo against real git: local repositories cloned on the host and pushed in, remote
ones served by ``git http-backend`` in a network namespace and cloned inside the sandbox
through its egress proxy (the host allowed for the clone only), a private one with a token
secret that lands nowhere, bad refs and clones over the cap leaving no sandbox behind."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, destroy_all, sweep
from tests.integration.gitserver import GitHost, Repo, git_host, make_repo


@pytest.fixture(scope="module")
def repos() -> Iterator[dict[str, Repo]]:
    root = Path(tempfile.mkdtemp(prefix="hutch-git-"))
    os.chmod(root, 0o755)
    try:
        yield {
            "public": make_repo(root / "srv", "public.git"),
            "private": make_repo(root / "srv", "private/secret.git"),
            "big": make_repo(root / "srv", "big.git", big=3 << 20),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def host(repos: dict[str, Repo]) -> Iterator[GitHost]:
    assert os.geteuid() == 0, "these tests build a network namespace: run them as root (as CI does)"
    tmp = Path(tempfile.mkdtemp(prefix="hutch-githost-"))
    try:
        with git_host(repos["public"].path.parent, tmp) as found:
            yield found
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def gitd(host: GitHost) -> Iterator[Daemon]:
    home = Path(tempfile.mkdtemp(prefix="hutch-test-"))
    d = Daemon(home, HUTCH_EGRESS_HOSTS=str(host.hosts)).start()
    try:
        yield d
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            subprocess.run(["rm", "-rf", str(home)], check=False)


def cli(d: Daemon, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hutch", *args], env={**d.env, **env}, capture_output=True, text=True, timeout=300
    )


def create(d: Daemon, *args: str, **env: str) -> dict[str, Any]:
    r = cli(d, "create", "--json", *args, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def sh(d: Daemon, sid: str, script: str) -> str:
    r = cli(d, "exec", sid, "--", "sh", "-c", script)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def events(d: Daemon, sid: str) -> list[dict[str, Any]]:
    with d.client() as c:
        return list(c.events(sid))


def live(d: Daemon) -> list[str]:
    with d.client() as c:
        return [r["id"] for r in c.list()]


def failed_create(d: Daemon, *args: str, **env: str) -> str:
    before = set(live(d))
    r = cli(d, "create", *args, **env)
    assert r.returncode != 0, r.stdout
    assert set(live(d)) == before, "a failed clone left a sandbox behind"
    return r.stderr


# -- local repositories: cloned here, pushed in -------------------------------------------------


def test_a_local_repository_is_cloned_at_its_ref(gitd: Daemon, repos: dict[str, Repo], tmp_path: Path) -> None:
    repo = repos["public"]
    rec = create(gitd, "--git-repo", str(repo.path))
    assert sh(gitd, rec["id"], "cat a.txt; git rev-parse HEAD; git rev-list --count HEAD") == f"two\n{repo.second}\n1\n"
    assert rec["spec"]["git"] == {"url": f"file://{repo.path}", "ref": None, "depth": 1, "secret": None,
                                  "username": None, "max_size": None}  # fmt: skip
    tag = create(gitd, "--git-repo", f"file://{repo.path}#v1", "--git-depth", "full")
    assert sh(gitd, tag["id"], "cat a.txt; git rev-list --count HEAD") == "one\n1\n"
    commit = create(gitd, "--git-repo", f"{repo.path}#{repo.first}")
    assert sh(gitd, commit["id"], "cat a.txt; git rev-parse HEAD") == f"one\n{repo.first}\n"
    full = create(gitd, "--git-repo", str(repo.path), "--git-depth", "full")
    assert sh(gitd, full["id"], "git rev-list --count HEAD") == "2\n"
    got = [(e["type"], e["data"].get("where"), e["data"].get("commit")) for e in events(gitd, rec["id"]) if "git" in e["type"]]
    assert got == [("git_clone_started", "host", None), ("git_cloned", None, repo.second)]
    # a relative path is the caller's: made absolute on the caller's side
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "create", "--json", "--git-repo", "public.git#v1"],
        env=gitd.env, cwd=repo.path.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["git"]["url"] == f"file://{repo.path}"


def test_a_bad_ref_or_path_fails_with_what_git_said_and_leaves_nothing(gitd: Daemon, repos: dict[str, Repo]) -> None:
    err = failed_create(gitd, "--git-repo", f"{repos['public'].path}#no-such-branch")
    assert "Remote branch no-such-branch not found" in err and "hint:" in err
    with gitd.client() as c:
        gone = [r for r in c.list(include_all=True) if r["state"] == "destroyed"]
    assert gone and "sandbox_setup_failed" in [e["type"] for e in events(gitd, gone[-1]["id"])]
    err = failed_create(gitd, "--git-repo", "/nonexistent/repo.git")
    assert "no such file or directory" in err
    err = failed_create(gitd, "--git-repo", f"{repos['public'].path}#{'0' * 40}")
    assert "failed" in err


def test_a_clone_over_the_cap_is_stopped(gitd: Daemon, repos: dict[str, Repo]) -> None:
    err = failed_create(gitd, "--git-repo", str(repos["big"].path), "--git-max-size", "1M")
    assert "passed its size cap of 1M" in err and "--git-max-size" in err
    assert not list((gitd.home / "tmp").glob("*-clone")), "the host-side clone was not removed"


def test_credentials_in_a_url_are_refused(gitd: Daemon) -> None:
    err = failed_create(gitd, "--git-repo", "https://me:hunter2@git.test/x.git")
    assert "credentials" in err and "--git-secret" in err and "hunter2" not in err
    err = failed_create(gitd, "--git-repo", "git@git.test:org/x.git")
    assert "scp-like" in err


# -- remote repositories: cloned inside, through the proxy --------------------------------------


def test_a_remote_repository_is_cloned_through_the_proxy_for_the_clone_only(
    gitd: Daemon, host: GitHost, repos: dict[str, Repo]
) -> None:
    rec = create(gitd, "--git-repo", f"{host.base}/public.git#v1")
    sid = rec["id"]
    assert sh(gitd, sid, "cat a.txt; git rev-parse HEAD") == f"one\n{repos['public'].first}\n"
    found = events(gitd, sid)
    started = next(e for e in found if e["type"] == "git_clone_started")
    assert started["data"]["network"] == "git.test:8080 allowed for the clone only" and started["data"]["where"] == "sandbox"
    allowed = [e for e in found if e["type"] == "egress_allowed"]
    assert allowed and {e["data"]["host"] for e in allowed} == {"git.test"}
    # afterwards the sandbox's own policy again: no network
    with gitd.client() as c:
        assert c.get(sid)["spec"]["network"]["mode"] == "none"
    r = cli(gitd, "exec", sid, "--", "git", "ls-remote", f"{host.base}/public.git")
    assert r.returncode != 0


def test_a_private_repository_takes_a_token_secret_that_lands_nowhere(
    gitd: Daemon, host: GitHost, repos: dict[str, Repo]
) -> None:
    url = f"{host.base}/private/secret.git"
    err = failed_create(gitd, "--git-repo", url)
    assert "failed" in err and ("401" in err or "Authentication" in err or "could not read Username" in err), err
    env = {"GIT_TOKEN_T": host.token}
    err = failed_create(gitd, "--git-repo", url, "--git-secret", "TOK", **env)
    assert "--secret TOK" in err  # the secret must be one of the sandbox's
    rec = create(gitd, "--git-repo", url, "--secret", "TOK=env:GIT_TOKEN_T", "--git-secret", "TOK", **env)
    sid = rec["id"]
    assert sh(gitd, sid, "cat a.txt") == "two\n"
    assert any(line.endswith("auth=ok") for line in host.requests())
    config = sh(gitd, sid, "cat .git/config; git config --list --show-origin || true")
    assert host.token not in config and f"url = {url}" in config
    texts = [json.dumps(events(gitd, sid)), cli(gitd, "get", "--json", sid).stdout, cli(gitd, "logs", sid).stdout]
    texts.append((gitd.home / "test-daemon.log").read_text())
    with sqlite3.connect(gitd.home / "hutch.db") as db:
        texts.append("\n".join(db.iterdump()))
    for text in texts:
        assert host.token not in text
    assert sh(gitd, sid, "grep -rl " + host.token[:12] + " .git || echo none") == "none\n"


def test_a_remote_clone_over_the_cap_fails_cleanly(gitd: Daemon, host: GitHost) -> None:
    err = failed_create(gitd, "--git-repo", f"{host.base}/big.git", "--git-max-size", "1M")
    assert "passed its size cap" in err


def test_an_image_without_git_says_so(daemon: Daemon, bb: str, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "hutch", "create", "--image", bb, "--git-repo", "https://git.example.com/x.git"],
        env=daemon.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode != 0 and "git is not installed in the sandbox (bb:1)" in r.stderr, r.stderr
    with daemon.client() as c:
        assert c.list() == []
