"""Bad input is refused at the edge with ``invalid`` (400), before anything is made.

Env names and values, command lines and paths that cannot reach a program (``=`` in a
name, NUL anywhere), names with a trailing newline, and numbers and counts without
bounds: each used to be accepted and fail later (a sandbox that could never run
anything, a 500, a wrapped limit, a setuid file).
"""

from __future__ import annotations

from typing import Any

import pytest

from hutch.checks import MAX_INT64, MAX_LABELS, MIN_MEMORY, check_mode, is_name
from hutch.errors import InvalidError

SANDBOXES = "/v1/sandboxes"


def assert_invalid(resp: Any, *needles: str) -> str:
    assert resp.status_code == 400, resp.text[:500]
    err = resp.json()["error"]
    assert err["kind"] == "invalid", err
    for needle in needles:
        assert needle in err["message"], err
    return str(err["message"])


def nothing_made(app_client: Any) -> None:
    assert app_client.get(SANDBOXES, params={"all": "true"}).json() == []


@pytest.fixture
def box(app_client: Any) -> str:
    resp = app_client.post(SANDBOXES, json={"provider": "fake", "name": "box"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


# -- item 8: env, argv, shell commands, paths ------------------------------------------------


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"A=B": "1"}, "env name"),
        ({"A\x00B": "1"}, "env name"),
        ({"A\nB": "1"}, "env name"),
        ({"": "1"}, "env name"),
        ({"K" * 257: "1"}, "env name"),
        ({"A": "x\x00y"}, "NUL"),
        ({"A": "x" * (128 << 10)}, "longer"),
        ({f"V{i}": "x" * 1000 for i in range(1100)}, "bytes"),
    ],
    ids=["equals", "nul-name", "newline-name", "empty-name", "long-name", "nul-value", "long-value", "total"],
)
def test_create_refuses_env_that_cannot_reach_a_program(app_client: Any, env: dict[str, str], needle: str) -> None:
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake", "env": env}), needle)
    nothing_made(app_client)


def test_env_names_execve_can_carry_are_kept(app_client: Any) -> None:
    env = {"npm_config_//registry.example/:_authToken": "t", "lower.dotted-name": "1", "A": ""}
    resp = app_client.post(SANDBOXES, json={"provider": "fake", "env": env})
    assert resp.status_code == 201, resp.text


def test_secret_value_with_nul_is_invalid(app_client: Any) -> None:
    resp = app_client.post(SANDBOXES, json={"provider": "fake", "secrets": {"TOKEN": "a\x00b"}})
    assert_invalid(resp, "TOKEN")
    nothing_made(app_client)


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        ({"command": ["echo", "a\x00b"]}, "argument 1"),
        ({"command": "echo a\x00b"}, "shell command"),
        ({"command": ["true"], "env": {"A=B": "1"}}, "exec env name"),
        ({"command": ["true"], "env": {"A": "\x00"}}, "NUL"),
        ({"command": ["true"], "cwd": "/work\x00space"}, "--cwd"),
        ({"command": ["x" * (128 << 10)]}, "longer"),
        ({"command": ["true"], "max_output": 1 << 40}, "max_output"),
    ],
    ids=["argv-nul", "shell-nul", "env-equals", "env-nul", "cwd-nul", "long-arg", "max-output"],
)
def test_exec_refuses_what_cannot_run(app_client: Any, box: str, req: dict[str, Any], needle: str) -> None:
    assert_invalid(app_client.post(f"{SANDBOXES}/{box}/exec", json=req), needle)
    assert app_client.get(f"{SANDBOXES}/{box}/runs").json() == []  # no run was recorded
    ok = app_client.post(f"{SANDBOXES}/{box}/exec", json={"command": ["true"]})
    assert ok.status_code == 200 and ok.json()["exit_code"] == 0
    assert app_client.get(f"{SANDBOXES}/{box}").json()["state"] == "running"


@pytest.mark.parametrize(
    ("method", "url", "params"),
    [
        ("GET", "files", {"path": "a\x00b"}),
        ("GET", "files", {"path": "a\x00b", "offset": "0"}),
        ("PUT", "files", {"path": "/workspace/a\x00b"}),
        ("GET", "ls", {"path": "/tmp\x00"}),
    ],
    ids=["read", "read-page", "write", "ls"],
)
def test_file_paths_with_nul_are_invalid(app_client: Any, box: str, method: str, url: str, params: dict[str, str]) -> None:
    resp = app_client.request(method, f"{SANDBOXES}/{box}/{url}", params=params, content=b"x")
    assert_invalid(resp, "NUL")


@pytest.mark.parametrize(
    "spec",
    [
        {"mounts": [{"source": "/tmp/a\x00", "target": "/mnt"}]},
        {"workdir": "/work\x00"},
    ],
    ids=["mount", "workdir"],
)
def test_spec_paths_with_nul_are_invalid(app_client: Any, spec: dict[str, Any]) -> None:
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake"} | spec), "NUL")
    nothing_made(app_client)


# -- item 9: a trailing newline is not part of a name -----------------------------------------


@pytest.mark.parametrize("name", ["nl-demo\n", "nl-demo\r\n", "\nnl-demo", "nl-demo\x00", "a" * 64])
def test_is_name_needs_the_whole_text(name: str) -> None:
    assert not is_name(name)
    assert is_name(name.strip("\r\n\x00")[:63])


def test_sandbox_name_with_trailing_newline_is_invalid(app_client: Any, box: str) -> None:
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake", "name": "box\n"}), "sandbox name")
    assert [r["name"] for r in app_client.get(SANDBOXES).json()] == ["box"]


def test_tenant_and_snapshot_names_with_trailing_newline_are_invalid(app_client: Any, box: str) -> None:
    resp = app_client.post("/v1/sessions", json={"provider": "fake", "tenant": "team\n"})
    assert_invalid(resp, "tenant name")
    assert_invalid(app_client.post(f"{SANDBOXES}/{box}/snapshots", json={"name": "snapnl\n"}), "snapshot name")
    assert app_client.get("/v1/snapshots").json() == []
    assert_invalid(app_client.delete("/v1/snapshots/snapnl%0A"), "snapshot name")
    assert_invalid(app_client.delete("/v1/tenants/team%0A"), "tenant name")
    assert_invalid(app_client.post(f"{SANDBOXES}/{box}/fork", json={"count": 1, "name_prefix": "f\n"}), "fork name")


@pytest.mark.parametrize("key", ["team\n", "team\x00"])
def test_label_key_with_trailing_newline_is_invalid(app_client: Any, box: str, key: str) -> None:
    assert_invalid(app_client.post(f"{SANDBOXES}/{box}/labels", json={"set": {key: "x"}}), "label key")


# -- item 10: every number and count from outside has a bound ---------------------------------


def test_events_after_past_int64_is_invalid_not_500(app_client: Any) -> None:
    assert_invalid(app_client.get("/v1/events", params={"after": str(1 << 63)}), "after")
    assert app_client.get("/v1/events", params={"after": str(MAX_INT64)}).json() == []
    assert_invalid(app_client.get("/v1/events", params={"since": "nan"}), "since")


@pytest.mark.parametrize("memory", ["18446744074246422528", 18446744074246422528, "2T", "99999999999999999999999T"])
def test_memory_above_the_bound_is_invalid(app_client: Any, memory: str | int) -> None:
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake", "limits": {"memory": memory}}), "--memory", "1T")
    nothing_made(app_client)


@pytest.mark.parametrize("pids", [10**12, 1 << 63, 0, 15])
def test_pids_out_of_bounds_is_invalid_and_no_record(app_client: Any, pids: int) -> None:
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake", "limits": {"pids": pids}}), "--pids")
    nothing_made(app_client)  # not a `failed` record either


def test_label_count_is_bounded(app_client: Any, box: str) -> None:
    many = {f"k{i}": "v" for i in range(10_000)}
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake", "labels": many}), "labels", str(MAX_LABELS))
    half = {f"a{i}": "v" for i in range(MAX_LABELS // 2 + 1)}
    assert app_client.post(f"{SANDBOXES}/{box}/labels", json={"set": half}).status_code == 200
    other = {f"b{i}": "v" for i in range(MAX_LABELS // 2)}
    assert_invalid(app_client.post(f"{SANDBOXES}/{box}/labels", json={"set": other}), "labels")
    assert len(app_client.get(f"{SANDBOXES}/{box}").json()["spec"]["labels"]) == MAX_LABELS // 2 + 1


@pytest.mark.parametrize("mode", ["7777", "4755", "2755", "1777", "1000", "-1", "8", "rw", "0o1000", ""])
def test_file_mode_outside_0_777_is_invalid(app_client: Any, box: str, mode: str) -> None:
    resp = app_client.put(f"{SANDBOXES}/{box}/files", params={"path": "f", "mode": mode}, content=b"x")
    assert_invalid(resp, "mode")


@pytest.mark.parametrize(("mode", "value"), [("644", 0o644), ("0755", 0o755), ("0o600", 0o600), ("0", 0), (0o777, 0o777)])
def test_file_modes_in_bounds(mode: str | int, value: int) -> None:
    assert check_mode(mode) == value


def test_file_mode_number_with_special_bits_is_invalid() -> None:
    with pytest.raises(InvalidError, match="mode"):
        check_mode(0o4755)


@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("files", {"path": "f", "offset": str(1 << 63)}),
        ("files", {"path": "f", "offset": "0", "limit": str(1 << 64)}),
    ],
)
def test_file_offsets_are_bounded(app_client: Any, box: str, url: str, params: dict[str, str]) -> None:
    assert_invalid(app_client.get(f"{SANDBOXES}/{box}/{url}", params=params))


def test_output_and_log_offsets_are_bounded(app_client: Any, box: str) -> None:
    run = app_client.post(f"{SANDBOXES}/{box}/exec", json={"command": ["true"]}).json()["run_id"]
    assert_invalid(app_client.get(f"/v1/runs/{run}/output", params={"stdout_offset": str(1 << 63)}))
    assert_invalid(app_client.get(f"{SANDBOXES}/{box}/logs", params={"offset": str(1 << 63)}))


@pytest.mark.parametrize("body", [b'{"provider": "fake", "ttl": NaN}', b'{"provider": "fake", "idle_timeout": Infinity}'])
def test_durations_must_be_finite(app_client: Any, body: bytes) -> None:
    resp = app_client.post(SANDBOXES, content=body, headers={"content-type": "application/json"})
    assert_invalid(resp, "duration")
    nothing_made(app_client)


def test_keepalive_ttl_must_be_finite(app_client: Any, box: str) -> None:
    resp = app_client.post(f"{SANDBOXES}/{box}/keepalive", content=b'{"ttl": NaN}', headers={"content-type": "application/json"})
    assert_invalid(resp, "duration")


@pytest.mark.parametrize("sig", [0, 65, 99999, 1 << 70])
def test_signal_numbers_are_bounded(app_client: Any, box: str, sig: int) -> None:
    run = app_client.post(f"{SANDBOXES}/{box}/exec", json={"command": ["sleep", "5"], "background": True}).json()
    resp = app_client.post(f"/v1/runs/{run.get('run_id') or run['id']}/kill", json={"signal": sig})
    assert_invalid(resp, "signal")


@pytest.mark.parametrize(
    "spec",
    [
        {"network": {"mode": "allowlist", "allow_hosts": [f"h{i}.example" for i in range(1025)]}},
        {"network": {"mode": "allowlist", "ports": list(range(1, 1100))}},
        {"require_approval": [f"exec:cmd{i}" for i in range(1025)]},
        {"mounts": [{"source": f"/tmp/m{i}", "target": f"/m{i}"} for i in range(65)]},
    ],
    ids=["hosts", "ports", "approvals", "mounts"],
)
def test_list_counts_are_bounded(app_client: Any, spec: dict[str, Any]) -> None:
    assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake"} | spec), "too many")
    nothing_made(app_client)


# -- item 16: limits too small to start a sandbox ----------------------------------------------


@pytest.mark.parametrize("memory", ["1K", "4M", "8M", "31M", MIN_MEMORY - 1])
def test_memory_too_small_to_start_is_invalid_and_says_the_minimum(app_client: Any, memory: str | int) -> None:
    message = assert_invalid(app_client.post(SANDBOXES, json={"provider": "fake", "limits": {"memory": memory}}))
    assert "32M" in message
    nothing_made(app_client)
