"""--git-repo against real git: local repositories cloned on the host and pushed in, remote
ones served by ``git http-backend`` in a network namespace and cloned inside the sandbox
through its egress proxy (the host allowed for the clone only), a private one with a token
secret that lands nowhere, the same token as a placeholder secret the proxy puts into git's
Basic credentials (over HTTP and HTTPS) while the sandbox holds only the placeholder, bad refs
and clones over the cap leaving no sandbox behind."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon, destroy_all, sweep
from tests.integration.gitserver import GitHost, Repo, git_host, make_repo
from tests.integration.sandboxmem import command_name, memory_holds, sandbox_pids


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
    d = Daemon(home, HUTCH_EGRESS_HOSTS=str(host.hosts), HUTCH_EGRESS_CA=str(host.ca)).start()
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
    assert_nowhere_outside(gitd, sid, host.token)
    assert sh(gitd, sid, "grep -rl " + host.token[:12] + " .git || echo none") == "none\n"


def assert_nowhere_outside(d: Daemon, sid: str, token: str) -> None:
    """The token is in no event, record, log or row of the daemon's database."""
    texts = [json.dumps(events(d, sid)), cli(d, "get", "--json", sid).stdout, cli(d, "logs", sid).stdout]
    texts.append((d.home / "test-daemon.log").read_text())
    with sqlite3.connect(d.home / "hutch.db") as db:
        texts.append("\n".join(db.iterdump()))
    for text in texts:
        assert token not in text


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_placeholder_token_is_put_in_by_the_proxy_and_the_sandbox_never_holds_it(
    gitd: Daemon, host: GitHost, scheme: str
) -> None:
    base, port = (host.base, host.port) if scheme == "http" else (host.tls_base, host.tls_port)
    url = f"{base}/private/secret.git"
    argv = [sys.executable, "-m", "hutch", "create", "--json", "--git-repo", url, "--secret", "TOK=env:GIT_TOKEN_T",
            "--git-secret", "TOK", "--secret-host", "TOK=git.test", "--allow-host", "git.test",
            "--allow-port", str(port)]  # fmt: skip
    before, had = len(host.requests()), set(live(gitd))
    host.gate.touch()  # git's authenticated request is held at the server while its processes are looked at
    env = {**gitd.env, "GIT_TOKEN_T": host.token}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not any(line.endswith("auth=ok") for line in host.requests()[before:]):
            assert time.monotonic() < deadline and proc.poll() is None, "no authenticated request arrived"
            time.sleep(0.1)
        (sid,) = set(live(gitd)) - had
        pids = sandbox_pids(gitd.home, sid)
        gits = [pid for pid in pids if command_name(pid).startswith("git")]  # the one that sent it waits at the gate
        assert gits, "git is not running in the sandbox"
        # git (the process that sent the credentials) and every other process hold the placeholder, never the token
        assert not [pid for pid in pids if memory_holds(pid, host.token.encode())]
        assert [pid for pid in gits if memory_holds(pid, b"hutch-secret-TOK-")]
    finally:
        host.gate.unlink(missing_ok=True)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert json.loads(out)["id"] == sid
    assert sh(gitd, sid, "cat a.txt") == "two\n"
    got = host.requests()[before:]
    assert any(line.endswith("auth=ok") for line in got) and not any(line.endswith("auth=bad") for line in got), got
    found = events(gitd, sid)
    subs = [e["data"] for e in found if e["type"] == "secret_substituted"]
    assert subs and all((s["host"], s["secret"], s["port"]) == ("git.test", "TOK", port) for s in subs), subs
    assert not [e for e in found if e["type"] == "secret_exfiltration_blocked"]
    started = next(e["data"] for e in found if e["type"] == "git_clone_started")
    assert started["network"] == "already allowed"
    # inside: the placeholder only, in the environment and the clone's config, and in no file
    r = cli(gitd, "exec", "--no-redact", sid, "--", "sh", "-c", 'printf %s "$TOK"; cat /proc/self/environ .git/config')
    assert r.returncode == 0 and r.stdout.startswith("hutch-secret-TOK-") and host.token not in r.stdout, r.stderr
    assert f"url = {url}" in r.stdout
    # (searched for a part of it: the whole never goes in, not even here)
    found_files = sh(gitd, sid, f'grep -rl {host.token[:12]} /workspace /tmp "$HOME" 2>/dev/null || echo none')
    assert found_files == "none\n"
    assert_nowhere_outside(gitd, sid, host.token)


def test_a_placeholder_token_bound_to_another_host_is_refused(gitd: Daemon, host: GitHost, repos: dict[str, Repo]) -> None:
    secret = ["--secret", "TOK=env:GIT_TOKEN_T", "--git-secret", "TOK", "--allow-host", "git.test"]
    elsewhere = [*secret, "--secret-host", "TOK=api.example.com", "--allow-host", "api.example.com"]
    before = len(host.requests())
    err = failed_create(gitd, "--git-repo", f"{host.base}/private/secret.git", *elsewhere, GIT_TOKEN_T=host.token)
    assert "placeholder bound to api.example.com, not to the repository's host git.test" in err, err
    assert "hint:" in err and "--secret-host TOK=git.test" in err and host.token not in err
    assert host.requests()[before:] == []  # refused before anything was made or sent
    err = failed_create(
        gitd, "--git-repo", str(repos["public"].path), *secret, "--secret-host", "TOK=git.test", GIT_TOKEN_T=host.token
    )
    assert "is cloned on this host" in err and "--secret-host TOK" in err


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
