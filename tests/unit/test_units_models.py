"""Sizes (units.py) and the pydantic specs (models.py)."""

from __future__ import annotations

import pytest

from hutch.errors import InvalidError
from hutch.models import (
    DEFAULT_MEMORY,
    DEFAULT_PIDS,
    ExecRequest,
    Limits,
    Mount,
    SandboxSpec,
    new_id,
)
from hutch.units import format_size, parse_size

# -- parse_size / format_size -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("65536", 65536),
        ("1", 1),
        ("512M", 512 << 20),
        ("512m", 512 << 20),
        ("512MB", 512 << 20),
        ("512MiB", 512 << 20),
        ("1G", 1 << 30),
        ("1.5GiB", 3 << 29),
        ("2k", 2048),
        ("1T", 1 << 40),
        (" 1G ", 1 << 30),
        ("1 G", 1 << 30),
        (4096, 4096),
    ],
)
def test_parse_size_good(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["banana", "", "   ", "-1", "1e3", "12X", "1GG", "M", "1.2.3G", True])
def test_parse_size_malformed_is_invalid_with_hint(bad: str | int) -> None:
    with pytest.raises(InvalidError) as info:
        parse_size(bad)
    err = info.value
    assert err.kind == "invalid"
    assert str(bad) in err.message
    assert err.hint, f"no hint for parse_size({bad!r})"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("0", id="str-0"),
        pytest.param("0.5", id="str-half-byte"),
        pytest.param(0, id="int-0"),
        pytest.param(-5, id="int-neg"),
    ],
)
def test_parse_size_non_positive_is_invalid_with_hint(bad: str | int) -> None:
    with pytest.raises(InvalidError) as info:
        parse_size(bad)
    err = info.value
    assert err.kind == "invalid"
    assert str(bad) in err.message
    assert err.hint, f"no hint for parse_size({bad!r})"


@pytest.mark.parametrize(
    ("size", "text"),
    [(1, "1"), (1000, "1000"), (1024, "1K"), (1536, "1536"), (512 << 20, "512M"), (1 << 30, "1G"), (3 << 40, "3T")],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


@pytest.mark.parametrize("size", [1, 7, 1024, 1025, 3 << 20, (1 << 30) + 1, 5 << 40])
def test_format_then_parse_round_trips(size: int) -> None:
    assert parse_size(format_size(size)) == size


# -- ids ----------------------------------------------------------------------------


def test_new_id_prefix_and_uniqueness() -> None:
    ids = {new_id("sbx") for _ in range(200)}
    assert len(ids) == 200
    assert all(i.startswith("sbx_") for i in ids)


# -- SandboxSpec ----------------------------------------------------------------------


def test_spec_defaults() -> None:
    spec = SandboxSpec()
    assert spec.name is None
    assert spec.workdir == "/workspace"
    assert spec.limits.memory == DEFAULT_MEMORY
    assert spec.limits.pids == DEFAULT_PIDS
    assert spec.limits.cpus is None
    assert spec.mounts == [] and spec.env == {} and spec.labels == {}


@pytest.mark.parametrize("name", ["a", "web-1", "my_box.2", "A" * 63, "0start", "x.y-z_w"])
def test_spec_good_names(name: str) -> None:
    assert SandboxSpec(name=name).name == name


@pytest.mark.parametrize(
    "name", ["", "A" * 64, "-lead", "_lead", ".lead", "has space", "slash/y", "colon:x", "sbx_abc", "run_abc", "é"]
)
def test_spec_bad_names(name: str) -> None:
    with pytest.raises(InvalidError) as info:
        SandboxSpec(name=name)
    assert info.value.hint
    assert "name" in info.value.message


@pytest.mark.parametrize("workdir", ["/", "/workspace", "/home/u/project"])
def test_spec_good_workdir(workdir: str) -> None:
    assert SandboxSpec(workdir=workdir).workdir == workdir


@pytest.mark.parametrize("workdir", ["", "workspace", "./x", "~/x"])
def test_spec_bad_workdir(workdir: str) -> None:
    with pytest.raises(InvalidError, match="workdir"):
        SandboxSpec(workdir=workdir)


def test_limits_memory_accepts_sizes() -> None:
    assert Limits(memory="512M").memory == 512 << 20
    assert Limits(memory=64 << 20).memory == 64 << 20
    assert SandboxSpec.model_validate({"limits": {"memory": "2G"}}).limits.memory == 2 << 30


def test_limits_memory_bad() -> None:
    with pytest.raises(InvalidError) as info:
        SandboxSpec.model_validate({"limits": {"memory": "banana"}})
    assert info.value.hint


@pytest.mark.parametrize("pids", [16, 512, 100000, 1 << 22])
def test_limits_pids_good(pids: int) -> None:
    assert Limits(pids=pids).pids == pids


@pytest.mark.parametrize("pids", [0, -1, 1, 15, (1 << 22) + 1, 10**12])
def test_limits_pids_bad(pids: int) -> None:
    with pytest.raises(InvalidError, match="pids"):
        Limits(pids=pids)


@pytest.mark.parametrize("cpus", [0.01, 0.5, 1, 2.5, 1024])
def test_limits_cpus_good(cpus: float) -> None:
    assert Limits(cpus=cpus).cpus == cpus


@pytest.mark.parametrize("cpus", [0, 0.009, -1, 1024.5, 1e9, float("nan"), float("inf")])
def test_limits_cpus_bad(cpus: float) -> None:
    with pytest.raises(InvalidError, match="cpus"):
        Limits(cpus=cpus)


def test_spec_json_round_trip() -> None:
    spec = SandboxSpec(
        name="box",
        provider="fake",
        limits=Limits(memory="256M", pids=64, cpus=0.5),
        env={"A": "1"},
        mounts=[Mount.parse("/src:/dst:ro")],
        labels={"team": "x"},
        workdir="/work",
    )
    again = SandboxSpec.model_validate_json(spec.model_dump_json())
    assert again == spec
    assert again.limits.memory == 256 << 20


# -- Mount.parse ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "source", "target", "readonly"),
    [
        ("/a:/b", "/a", "/b", False),
        ("/a:/b:ro", "/a", "/b", True),
        ("/a:/b:rw", "/a", "/b", False),
        ("rel/dir:/workspace/x", "rel/dir", "/workspace/x", False),
    ],
)
def test_mount_parse_good(text: str, source: str, target: str, readonly: bool) -> None:
    m = Mount.parse(text)
    assert (m.source, m.target, m.readonly) == (source, target, readonly)


@pytest.mark.parametrize("text", ["", "/a", "/a:/b:x", "/a:/b:ro:extra", "/a:/b:RO"])
def test_mount_parse_bad(text: str) -> None:
    with pytest.raises(InvalidError) as info:
        Mount.parse(text)
    assert "HOST:SANDBOX" in (info.value.hint or "")


@pytest.mark.parametrize("text", [":/b", "/a:", "/a::ro"])
def test_mount_parse_rejects_empty_parts(text: str) -> None:
    # The CLI (build_spec) rejects an empty HOST or SANDBOX part; the model must agree.
    with pytest.raises(InvalidError):
        Mount.parse(text)


def test_mount_is_frozen() -> None:
    m = Mount.parse("/a:/b")
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        m.source = "/c"  # type: ignore[misc]


# -- ExecRequest ----------------------------------------------------------------------


def test_exec_string_runs_under_shell() -> None:
    assert ExecRequest(command="make && make test").argv() == ["/bin/sh", "-c", "make && make test"]


def test_exec_list_is_argv() -> None:
    assert ExecRequest(command=["ls", "-la", "a b"]).argv() == ["ls", "-la", "a b"]


def test_exec_argv_is_a_copy() -> None:
    req = ExecRequest(command=["ls"])
    req.argv().append("x")
    assert req.argv() == ["ls"]


def test_exec_empty_list_is_invalid_with_hint() -> None:
    with pytest.raises(InvalidError) as info:
        ExecRequest(command=[]).argv()
    assert info.value.kind == "invalid"
    assert info.value.hint and "--" in info.value.hint


def test_exec_defaults() -> None:
    req = ExecRequest(command=["true"])
    assert req.env == {} and req.cwd is None and req.timeout is None and req.stdin is None
    assert req.max_output == 1 << 20
