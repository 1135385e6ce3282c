"""The provider contract: what every provider must do, proven the same way for each.

Every case runs against every provider in ``conftest.PROVIDERS``: ``fake`` (in memory),
``local`` (real bwrap sandboxes, real cgroups) and ``unikraft`` (the spec-built Unikraft
Cloud test server, whose instances are real local sandboxes). A new provider joins the
list and must pass the same cases.

How the providers are driven: through an in-process :class:`hutch.service.Service` on a
long-lived event loop thread. The Service is a provider's only caller, so this is exactly
the path every edge (CLI, SDK, MCP, HTTP) reaches a provider by, minus the HTTP hop, which
has its own tests; it keeps the suite fast (one Service, one shared sandbox per provider
for the cases that only run commands) and lets a case look at the store (events, runs)
and at the provider's side (sandbox directories, cgroups, the test server's instances)
directly. The one case the in-process Service cannot tell honestly is a daemon restart:
that one starts a real ``hutch serve``, kills it with SIGKILL and starts it again.

Optional behaviour follows the provider's declared ``capabilities``, never a silent skip:
a provider that declares a capability must deliver it, and one that does not must have
the Service refuse the request with ``invalid`` before anything is made (no sandbox
recorded, nothing left at the provider). The fake provider emulates a fixed command
vocabulary (see :mod:`hutch.providers.fake`) instead of running programs, so the cases
that need a real program (a memory hog, a fork loop, a network connect, an executable
file) check its recorded side only; ``Target.real_programs`` says which providers run
real programs.
"""

from __future__ import annotations

import base64
import io
import shutil
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.conftest import destroy_all, sweep

from hutch.errors import ConflictError, HutchError, InvalidError, NotFoundError
from hutch.models import ExecResult, RunStatus, SandboxRecord, SandboxState

if TYPE_CHECKING:
    from tests.contract.conftest import Target

pytestmark = pytest.mark.integration
New = Callable[..., SandboxRecord]
DEADLINE = 120.0  # for anything polled: generous, the machine may be loaded


def refused(target: Target, action: Callable[[], Any]) -> InvalidError:
    """``action`` is refused with ``invalid`` and leaves nothing behind."""
    before = (target.sandbox_ids(), target.resources(), target.snapshot_names())
    with pytest.raises(InvalidError) as info:
        action()
    assert info.value.hint, f"no hint with {info.value.message!r}"
    assert (target.sandbox_ids(), target.resources(), target.snapshot_names()) == before
    return info.value


def decoded(result: ExecResult, stream: str) -> bytes:
    text = getattr(result, stream)
    return base64.b64decode(text) if getattr(result, f"{stream}_base64") else text.encode()


def until(check: Callable[[], Any], what: str) -> Any:
    end = time.monotonic() + DEADLINE
    while not (value := check()):
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)
    return value


# -- lifecycle -----------------------------------------------------------------------------


def test_create_inspect_exec_destroy_and_the_events(target: Target) -> None:
    rec = target.create(name=f"life-{target.name}", labels={"suite": "contract"})
    assert (rec.state, rec.provider) == (SandboxState.running, target.name)
    assert target.get(rec.name or "").id == rec.id and target.get(rec.id).spec.labels == {"suite": "contract"}
    result = target.exec(rec.id, ["echo", "hi"])
    assert (result.exit_code, result.status, result.stdout) == (0, RunStatus.completed, "hi\n")

    gone = target.destroy(rec.id)
    assert (gone["destroyed"], gone["existed"]) == (True, True)
    again = target.destroy(rec.id)  # idempotent: succeeds and says so
    assert (again["destroyed"], again["existed"]) == (True, False)
    assert target.destroy("sbx_neverexisted")["existed"] is False
    assert target.get(rec.id).state == SandboxState.destroyed
    assert target.leftovers(rec) == []
    with pytest.raises(NotFoundError):
        target.exec(rec.id, ["true"])

    events = target.events(rec.id)
    types = [e["type"] for e in events if e["type"] in ("sandbox_created", "run_started", "run_finished", "sandbox_destroyed")]
    assert types == ["sandbox_created", "run_started", "run_finished", "sandbox_destroyed"]
    started, finished = (e for e in events if e["type"] in ("run_started", "run_finished"))
    assert started["run_id"] == finished["run_id"] == result.run_id
    assert (finished["data"]["exit_code"], finished["data"]["status"]) == (0, "completed")


# -- exec ----------------------------------------------------------------------------------


def test_exit_code_and_separate_streams(target: Target, shared: SandboxRecord) -> None:
    r = target.exec(shared.id, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_code, r.status, r.stdout, r.stderr) == (3, RunStatus.failed, "out\n", "err\n")
    assert (r.stdout_bytes, r.stderr_bytes, r.truncated) == (4, 4, False)
    assert target.run(r.run_id)["status"] == "failed" and target.run(r.run_id)["exit_code"] == 3
    assert (target.exec(shared.id, ["true"]).exit_code, target.exec(shared.id, ["false"]).exit_code) == (0, 1)
    missing = target.exec(shared.id, ["no-such-program-here"])
    assert missing.exit_code == 127 and "no-such-program-here" in missing.stderr + (missing.error or "")


def test_binary_output_and_stdin_round_trip(target: Target, shared: SandboxRecord) -> None:
    data = bytes(range(256)) * 8 + b"\xff\xfe\x00 not utf-8 \xc3\x28"
    stdin = base64.b64encode(data).decode()
    r = target.exec(shared.id, ["cat"], stdin=stdin, stdin_base64=True)
    assert r.exit_code == 0 and r.stdout_base64 and decoded(r, "stdout") == data and r.stdout_bytes == len(data)
    r = target.exec(shared.id, ["sh", "-c", "cat >&2"], stdin=stdin, stdin_base64=True)
    assert r.stderr_base64 and decoded(r, "stderr") == data and r.stdout == ""
    text = "line one\nline two, ünïcode\n"
    assert target.exec(shared.id, ["cat"], stdin=text).stdout == text
    empty = target.exec(shared.id, ["cat"])  # no stdin: end of file at once, never a hang
    assert (empty.exit_code, empty.stdout) == (0, "")


def test_output_over_the_cap_is_cut_loudly(target: Target, shared: SandboxRecord) -> None:
    data = bytes(range(256)) * 40
    capped = target.exec(shared.id, ["cat"], stdin=base64.b64encode(data).decode(), stdin_base64=True, max_output=1000)
    assert (decoded(capped, "stdout"), capped.stdout_bytes, capped.truncated) == (data[:1000], len(data), True)
    exact = target.exec(shared.id, ["cat"], stdin=base64.b64encode(data[:1000]).decode(), stdin_base64=True, max_output=1000)
    assert (exact.stdout_bytes, exact.truncated) == (1000, False)


def test_a_stream_delivers_every_byte(target: Target, shared: SandboxRecord) -> None:
    data = bytes(range(256)) * (3 * 4096 + 7)  # 3 MiB and a bit: over the default 1 MiB result cap
    stdin = base64.b64encode(data).decode()
    events = target.stream(shared.id, ["sh", "-c", "cat; echo done >&2; exit 5"], stdin=stdin, stdin_base64=True)
    assert events[0]["type"] == "run" and events[-1]["type"] == "exit"
    got = {"stdout": b"", "stderr": b""}
    for e in events[1:-1]:
        got[e["type"]] += base64.b64decode(e["data"]) if e["base64"] else e["data"].encode()
    assert len(got["stdout"]) == len(data) and got["stdout"] == data, "the stream lost bytes"
    assert got["stderr"] == b"done\n"
    exit_ = events[-1]
    assert (exit_["exit_code"], exit_["status"], exit_["stdout_bytes"]) == (5, "failed", len(data))


def test_interactive_runs_where_declared(target: Target, shared: SandboxRecord) -> None:
    if not target.capabilities.interactive:
        runs = target.runs(shared.id)
        refused(target, lambda: target.attach(shared.id, ["cat"]))
        assert target.runs(shared.id) == runs, "a refused interactive run was recorded"
        return
    run = target.attach(shared.id, ["cat"])
    run.send({"stdin": b"one\n"})
    out, _ = run.until(lambda out, e: out == b"one\n")  # answered while it runs, before any end of file
    run.send({"stdin": bytes(range(256)) * 4096})  # one message larger than any frame
    run.send({"eof": True})
    out, last = run.until(lambda out, e: e["type"] == "exit")
    assert (out, last["exit_code"]) == (bytes(range(256)) * 4096, 0)
    if target.real_programs:
        terminal = target.attach(shared.id, ["sh", "-c", "tty; read line; echo got $line"], tty=True)
        out, _ = terminal.until(lambda out, e: b"/dev/pts/" in out)
        terminal.send({"stdin": b"typed\r"})
        out, last = terminal.until(lambda out, e: e["type"] == "exit")
        assert b"got typed" in out and last["exit_code"] == 0


def test_env_and_cwd(target: Target, shared: SandboxRecord) -> None:
    assert target.exec(shared.id, ["printenv", "GREETING"]).stdout == "hello from the spec\n"
    r = target.exec(shared.id, ["printenv", "RUN_VAR"], env={"RUN_VAR": "from the run"})
    assert r.stdout == "from the run\n"
    r = target.exec(shared.id, ["printenv", "GREETING"], env={"GREETING": "the run's wins"})
    assert r.stdout == "the run's wins\n"
    assert target.exec(shared.id, ["printenv", "NOT_SET_ANYWHERE"]).exit_code == 1
    assert target.exec(shared.id, ["sh", "-c", "echo $GREETING"]).stdout == "hello from the spec\n"
    assert target.exec(shared.id, ["pwd"]).stdout == f"{shared.spec.workdir}\n"
    target.write(shared.id, "cwd/deeper/marker", b"x")
    r = target.exec(shared.id, ["pwd"], cwd=f"{shared.spec.workdir}/cwd/deeper")
    assert r.stdout == f"{shared.spec.workdir}/cwd/deeper\n"
    assert target.exec(shared.id, ["cat", "marker"], cwd=f"{shared.spec.workdir}/cwd/deeper").stdout == "x"


def test_wall_timeout_and_idle_timeout(target: Target, shared: SandboxRecord) -> None:
    r = target.exec(shared.id, ["sleep", "60"], timeout=1)
    assert (r.status, r.exit_code) == (RunStatus.timed_out, 124)
    assert (target.run(r.run_id)["status"], target.run(r.run_id)["exit_code"]) == ("timed_out", 124)
    # quiet for longer than the idle timeout, long before the wall timeout: the idle one ends it
    r = target.exec(shared.id, ["sh", "-c", "echo first; sleep 60"], idle_timeout=1, timeout=600)
    assert (r.status, r.exit_code, r.stdout) == (RunStatus.timed_out, 124, "first\n")
    assert target.exec(shared.id, ["echo", "still here"]).stdout == "still here\n"


def test_background_run_wait_poll_kill_and_ps(target: Target, shared: SandboxRecord) -> None:
    quick = target.start(shared.id, ["sh", "-c", "echo bg-out; echo bg-err >&2; exit 4"])
    assert quick["id"].startswith("run_") and quick["background"]
    done = target.wait(quick["id"])
    assert (done["status"], done["exit_code"]) == ("failed", 4)
    out = target.poll(quick["id"])
    assert (out["stdout"]["data"], out["stderr"]["data"], out["done"]) == ("bg-out\n", "bg-err\n", True)

    long = target.start(shared.id, ["sh", "-c", "echo started; sleep 97"])
    until(lambda: target.poll(long["id"])["stdout"]["data"] == "started\n", "the background run's first output")
    assert target.run(long["id"])["status"] == "running"
    assert long["id"] in {r["id"] for r in target.runs(shared.id, "running")}
    procs = target.ps(shared.id)
    assert all(isinstance(p["pid"], int) and isinstance(p["command"], str) for p in procs)
    assert any("sleep 97" in p["command"] for p in procs), procs
    polled = target.poll(long["id"], stdout=len("started\n"))  # from an offset: only what is new
    assert (polled["stdout"]["data"], polled["stdout"]["offset"], polled["done"]) == ("", 8, False)

    assert target.kill(long["id"], "KILL")["signalled"] is True
    killed = target.wait(long["id"])
    assert killed["status"] == "killed"
    assert target.poll(long["id"])["stdout"]["data"] == "started\n"  # output outlives the run
    assert target.kill(long["id"], "KILL")["signalled"] is False
    assert not any("sleep 97" in p["command"] for p in target.ps(shared.id))
    with pytest.raises(InvalidError):
        target.kill(long["id"], "NOT-A-SIGNAL")


def test_run_survives_a_daemon_restart(target: Target, hutch_home: Path) -> None:
    """Where ``survives_daemon``: a run started before a SIGKILL of the daemon is adopted and
    finishes with all its output. Elsewhere: the sandbox and its run are reported ``lost``."""
    survives = target.capabilities.survives_daemon
    before = target.resources()
    d = target.daemon(hutch_home).start()
    try:
        with d.client() as c:
            if target.pooled:  # the daemon's own pool: its run survives the restart as a cold one's does
                until(lambda: c.pool_status()["pools"][0]["ready"], "a pool member")
            sbx = c.create({"provider": target.name, **target.extra})
            if target.pooled:
                assert [e["data"].get("pool") for e in c.events(sbx["id"]) if e["type"] == "sandbox_created"] == [True]
            script = "echo before; while [ ! -e go ]; do sleep 0.1; done; echo after" if survives else "sleep 600"
            run = c.exec(sbx["id"], {"command": ["sh", "-c", script], "background": True})
            if survives:
                until(lambda: c.output(run["id"])["stdout"]["data"] == "before\n", "the run's first output")
        d.kill9()
        d.start()
        with d.client() as c:
            if survives:
                assert (c.get(sbx["id"])["state"], c.run(run["id"])["status"]) == ("running", "running")
                c.write_file(sbx["id"], "go", b"")
                done = c.wait(run["id"], timeout=DEADLINE)
                assert (done["status"], done["exit_code"]) == ("completed", 0)
                assert c.output(run["id"])["stdout"]["data"] == "before\nafter\n"
            else:
                assert (c.get(sbx["id"])["state"], c.run(run["id"])["status"]) == ("lost", "lost")
    finally:
        try:
            destroy_all(hutch_home)
        finally:
            d.stop()
            sandboxes = hutch_home / "sandboxes"
            left = sorted(p.name for p in sandboxes.iterdir()) if sandboxes.is_dir() else []
            sweep(hutch_home)
    assert left == [], "the daemon's destroy left sandbox directories"
    assert target.resources() == before, "the daemon's destroy left something at the provider"


# -- files ---------------------------------------------------------------------------------


def test_files_write_read_list_ranges_and_modes(target: Target, shared: SandboxRecord) -> None:
    """Files are core: every provider reads (also a page, ``ranged_reads`` or not), writes and lists."""
    blob = bytes(range(256)) * 16
    wrote = target.write(shared.id, "files/a.txt", b"alpha\n")
    assert (wrote["path"], wrote["size"]) == (f"{shared.spec.workdir}/files/a.txt", 6)
    target.write(shared.id, f"{shared.spec.workdir}/files/blob", blob)  # absolute paths too
    target.write(shared.id, "files/tool.sh", b"#!/bin/sh\necho tool ran\n", mode=0o755)
    target.write(shared.id, "files/private", b"mine", mode=0o600)

    assert target.read(shared.id, "files/a.txt") == (b"alpha\n", False)
    assert target.read(shared.id, "files/blob") == (blob, False)
    assert target.read(shared.id, "files/a.txt", limit=3) == (b"alp", True)
    with pytest.raises(NotFoundError):
        target.read(shared.id, "files/none")
    page, more, size = target.read_range(shared.id, "files/blob", 1000, 50)
    assert (page, more) == (blob[1000:1050], True) and size in (len(blob), None)
    page, more, size = target.read_range(shared.id, "files/blob", len(blob) - 10, 50)
    assert (page, more) == (blob[-10:], False) and size in (len(blob), None)

    listing = {e.name: e for e in target.ls(shared.id, "files")}
    assert sorted(listing) == ["a.txt", "blob", "private", "tool.sh"]
    assert {n: (e.type, e.size) for n, e in listing.items()} == {
        "a.txt": ("file", 6),
        "blob": ("file", len(blob)),
        "private": ("file", 4),
        "tool.sh": ("file", 24),
    }
    assert {n: e.mode & 0o777 for n, e in listing.items()} == {"a.txt": 0o644, "blob": 0o644, "private": 0o600, "tool.sh": 0o755}
    assert ("files", "dir") in {(e.name, e.type) for e in target.ls(shared.id)}
    assert target.exec(shared.id, ["cat", "files/a.txt"]).stdout == "alpha\n"  # runs see written files
    if target.real_programs:  # and files made by runs are read back; modes are real
        assert target.exec(shared.id, ["./files/tool.sh"]).stdout == "tool ran\n"
        target.exec(shared.id, ["sh", "-c", "printf made > files/by-run"])
        assert target.read(shared.id, "files/by-run") == (b"made", False)


# -- limits, network, pause ------------------------------------------------------------------


HOGS = {  # (a workload within the limit, one beyond it), for sandboxes made with LIMITS
    "memory": ("head -c 16m /dev/zero | tail > /dev/null", "head -c 512m /dev/zero | tail > /dev/null"),
    "pids": (
        "for i in 1 2 3 4; do sleep 1 & done; wait",
        # 64 processes alive at once however slowly they start (ones that end on their own, as
        # `sleep 1` did, may be gone before the last starts on a loaded machine): the shell fails
        # at the fork the limit refuses, or ends well if all 64 started; either way its EXIT trap
        # ends them (kill 0: its process group), so the sandbox gets its pids back at once
        "trap 'trap : TERM; kill 0' EXIT; i=0; while [ $i -lt 64 ]; do sleep 300 & i=$((i+1)); done",
    ),
}
LIMITS = {"memory": {"memory": "128M"}, "pids": {"pids": 32}, "cpus": {"cpus": 0.5}}


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_declared_limits_are_applied(target: Target, new: New, limit: str) -> None:
    if limit not in target.capabilities.limits:
        if limit in ("memory", "pids"):
            # Left out: an undeclared memory or pids limit is accepted and reported as not
            # enforced instead of refused (a spec cannot yet tell a requested limit from its default).
            return
        refused(target, lambda: target.create(limits=LIMITS[limit]))
        return
    rec = new(limits=LIMITS[limit])
    assert rec.enforcement.get(limit), f"no enforcement recorded for {limit}: {rec.enforcement}"
    if target.real_programs and limit in HOGS:
        within, beyond = HOGS[limit]
        ok = target.exec(rec.id, ["sh", "-c", within], timeout=120)
        assert (ok.exit_code, ok.status) == (0, RunStatus.completed), ok
        if limit == "memory" and target.capabilities.oom_ends_sandbox:  # declared: the OOM kill takes the sandbox
            with pytest.raises(HutchError):
                target.exec(rec.id, ["sh", "-c", beyond], timeout=120)
            deadline = time.monotonic() + 120
            while target.get(rec.id).state == "running":
                assert time.monotonic() < deadline, "the sandbox outlived its OOM kill"
                time.sleep(0.2)
            dead = target.get(rec.id)
            assert "memory" in (dead.error or ""), dead.error
            return
        over = target.exec(rec.id, ["sh", "-c", beyond], timeout=120)
        assert over.exit_code != 0 and over.status != RunStatus.completed, over
        assert target.exec(rec.id, ["echo", "alive"]).stdout == "alive\n"  # the sandbox outlives it


def test_network_is_none_by_default(target: Target, shared: SandboxRecord) -> None:
    assert shared.spec.network.mode == "none"
    if not target.real_programs:
        return
    with socket.socket() as listener:  # a host listener the sandbox must not reach
        listener.bind(("0.0.0.0", 0))
        listener.listen(4)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        hosts = ["127.0.0.1"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:  # the host's own address on its main route (a UDP connect sends nothing)
                probe.connect(("10.255.255.1", 9))
                hosts.append(probe.getsockname()[0])
            except OSError:
                pass
        for host in hosts:
            r = target.exec(shared.id, ["bash", "-c", f"exec 3<>/dev/tcp/{host}/{port} && echo connected"], timeout=60)
            assert r.exit_code != 0 and "connected" not in r.stdout, (host, r)
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_egress_policies_where_declared(target: Target, new: New) -> None:
    if not target.capabilities.network:
        refused(target, lambda: target.create(network={"mode": "allowlist", "allow_hosts": ["example.com"]}))
        return
    rec = new(network={"mode": "allowlist", "allow_hosts": ["example.com"]})
    assert (rec.spec.network.mode, rec.spec.network.allow_hosts) == ("allowlist", ["example.com"])
    assert target.exec(rec.id, ["echo", "ok"]).exit_code == 0


def test_pause_and_resume_where_declared(target: Target, new: New) -> None:
    if not target.capabilities.pause:
        refused(target, lambda: target.create(on_expire="pause", ttl=3600))
        rec = new()
        refused(target, lambda: target.pause(rec.id))
        assert target.get(rec.id).state == SandboxState.running
        return
    rec = new()
    assert target.pause(rec.id)["state"] == "paused"
    assert target.get(rec.id).state == SandboxState.paused
    with pytest.raises(ConflictError):
        target.exec(rec.id, ["true"])
    assert target.pause(rec.id)["changed"] is False
    assert target.resume(rec.id)["state"] == "running"
    assert target.exec(rec.id, ["echo", "thawed"]).stdout == "thawed\n"
    types = [e["type"] for e in target.events(rec.id)]
    assert types.index("sandbox_paused") < types.index("sandbox_resumed")


# -- options a provider may not have ---------------------------------------------------------


def test_secrets_where_declared(target: Target, new: New) -> None:
    if not target.capabilities.secrets:
        refused(target, lambda: target.create(secrets={"API_TOKEN": "s3cret-value-123"}))
        return
    rec = new(secrets={"API_TOKEN": "s3cret-value-123"})
    assert rec.spec.secret_names == ["API_TOKEN"]
    r = target.exec(rec.id, ["printenv", "API_TOKEN"])
    assert (r.exit_code, r.stdout) == (0, "[redacted:API_TOKEN]\n")
    stored = repr([target.get(rec.id).model_dump(), target.events(rec.id), target.runs(rec.id)])
    assert "s3cret-value-123" not in stored


def test_mounts_where_declared(target: Target, new: New) -> None:
    src = Path(tempfile.mkdtemp(prefix="hutch-contract-mount-"))
    src.chmod(0o755)
    (src / "data.txt").write_text("from the host\n")
    (src / "data.txt").chmod(0o644)
    mount = {"source": str(src), "target": "/mnt/data", "readonly": True}
    try:
        if not target.capabilities.mounts:
            refused(target, lambda: target.create(mounts=[mount]))
            return
        rec = new(mounts=[mount])
        assert target.exec(rec.id, ["cat", "/mnt/data/data.txt"]).stdout == "from the host\n"
        if target.real_programs:
            assert target.exec(rec.id, ["sh", "-c", "echo x > /mnt/data/new"]).exit_code != 0
            assert not (src / "new").exists()
    finally:
        shutil.rmtree(src)


def test_provider_options_only_where_declared(target: Target, new: New) -> None:
    """A spec's provider options: each key the provider does not declare is refused before
    anything is made (naming who takes it); a value it cannot take is refused the same way."""
    known = {"metro": "fra", "ssh": "true"}  # the built-in providers' options
    for key, value in {"no-such-option": "x", **known}.items():
        if key not in target.capabilities.options:
            err = refused(target, lambda key=key, value=value: target.create(provider_options={key: value}))
            assert repr(key) in err.message
    if "metro" in target.capabilities.options:
        err = refused(target, lambda: target.create(provider_options={"metro": "mars"}))
        assert "metro" in err.message


def test_images_where_declared(target: Target, new: New) -> None:
    if not target.capabilities.images:
        refused(target, lambda: target.create(image="debian-slim:latest"))
        return
    rec = new(image=target.image())
    assert target.exec(rec.id, ["echo", "booted"]).stdout == "booted\n"


def test_subagents_share_the_workspace_where_declared(target: Target, new: New) -> None:
    parent = new()
    if not target.capabilities.shared_workspace:
        refused(target, lambda: target.subagent(parent.id))
        return
    child = target.subagent(parent.id, workspace="ro")
    try:
        target.write(parent.id, "shared.txt", b"from the parent")
        assert target.read(child.id, "shared.txt") == (b"from the parent", False)
        assert target.exec(child.id, ["cat", "shared.txt"]).stdout == "from the parent"
    finally:
        target.destroy(child.id)


# -- workspaces --------------------------------------------------------------------------------


def workspace_tree(root: Path) -> dict[str, tuple[bytes, int]]:
    files = {
        "a.txt": (b"alpha\n", 0o644),
        "bin/tool.sh": (b"#!/bin/sh\necho tool\n", 0o755),
        "deep/er/b.bin": (bytes(range(256)), 0o644),
    }
    for rel, (data, mode) in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        (root / rel).chmod(mode)
    return files


def has_tree(target: Target, ref: str, files: dict[str, tuple[bytes, int]]) -> None:
    for rel, (data, mode) in files.items():
        assert target.read(ref, rel) == (data, False), rel
        (entry,) = [e for e in target.ls(ref, rel.rsplit("/", 1)[0] if "/" in rel else None) if e.name == rel.split("/")[-1]]
        assert entry.mode & 0o777 == mode, (rel, oct(entry.mode))


def test_push_pull_snapshot_fork_where_declared(target: Target, new: New, tmp_path: Path) -> None:
    caps = target.capabilities
    files = workspace_tree(tmp_path)
    rec = new(**({"provider_options": {"ssh": "true"}} if "ssh" in caps.options else {}))  # unikraft pushes over SSH
    if not (caps.workspace or caps.transfer):
        refused(target, lambda: target.push(rec.id, tmp_path))
        refused(target, lambda: target.pull(rec.id))
    else:
        summary = target.push(rec.id, tmp_path)
        assert (summary["files_sent"], summary["deleted"]) == (3, 0)
        has_tree(target, rec.id, files)
        assert target.push(rec.id, tmp_path)["files_sent"] == 0  # nothing changed: nothing travels
        with tarfile.open(fileobj=io.BytesIO(target.pull(rec.id))) as tar:
            pulled = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
            assert {n: (tar.extractfile(m).read(), m.mode & 0o777) for n, m in pulled.items()} == files  # type: ignore[union-attr]
    if not caps.workspace:
        refused(target, lambda: target.snapshot_save(rec.id, f"snap-{target.name}"))
        refused(target, lambda: target.fork(rec.id))
        return
    target.snapshot_save(rec.id, f"snap-{target.name}")
    restored = target.snapshot_restore(f"snap-{target.name}")
    try:
        has_tree(target, restored.id, files)
    finally:
        target.destroy(restored.id)
        target.snapshot_delete(f"snap-{target.name}")
    forked = target.fork(rec.id)
    assert (forked["created"], forked["failed"]) == (1, 0), forked
    child = forked["children"][0]["sandbox"]
    try:
        has_tree(target, child, files)
        target.write(child, "a.txt", b"changed in the fork\n")
        assert target.read(rec.id, "a.txt") == (b"alpha\n", False)  # a copy, not a share
    finally:
        target.destroy(child)


def test_exec_as_another_user_where_declared(target: Target, shared: SandboxRecord, new: New) -> None:
    """A sandbox without users of its own (the default) refuses exec --user before a run, everywhere; where
    the provider switches users, a sandbox that runs as root inside runs one command as another uid."""
    runs = target.runs(shared.id)
    refused(target, lambda: target.exec(shared.id, ["id", "-u"], user="4242:4242"))
    assert target.runs(shared.id) == runs, "a refused exec --user was recorded"
    if not target.capabilities.exec_users:
        return
    rec = new(user="root")
    r = target.exec(rec.id, ["sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"], user="4242:4242")
    assert r.exit_code == 0, r
    assert r.stdout.split()[:2] == ["4242", "4242"] and r.stdout.split()[3] == "0000000000000000", r.stdout
