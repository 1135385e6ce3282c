"""``hutch destroy`` of several sandboxes goes on past a failure and reports each one;
teardown of something already gone succeeds and says so, for every kind of thing."""

from __future__ import annotations

from typing import Any

from test_cli import assert_json_error, cli, daemon_home, one_json  # noqa: F401 - fixtures and helpers


def _create(cli: Any, *args: str) -> str:  # noqa: F811
    code, out, _ = cli("create", *args)
    assert code == 0, out
    return out.split()[0]


def _approve_and_destroy(cli: Any, sandbox_id: str) -> None:  # noqa: F811
    code, doc = cli.json("destroy", sandbox_id, "--json")
    if code == 0:
        return
    gate = doc["error"]["approval_id"]
    assert cli("approve", gate)[0] == 0
    assert cli("destroy", sandbox_id, "--approval", gate)[0] == 0


def test_destroy_all_goes_on_past_a_sandbox_that_needs_approval(cli: Any) -> None:  # noqa: F811
    first = _create(cli)
    gated = _create(cli, "--require-approval", "destroy", "--name", "gated")
    last = _create(cli)
    try:
        code, results = cli.json("destroy", "--all", "--json")
        assert code == 1  # one failed
        by_id = {r["sandbox"]: r for r in results}
        assert set(by_id) == {first, gated, last}  # one result per sandbox
        assert by_id[first]["destroyed"] is True and by_id[first]["existed"] is True
        assert by_id[last]["destroyed"] is True and by_id[last]["existed"] is True
        refused = by_id[gated]
        assert refused["destroyed"] is False and refused["name"] == "gated"
        assert refused["error"]["kind"] == "approval_required"
        assert refused["error"]["approval_id"].startswith("apr_")
        assert cli.live_ids() == {gated}
    finally:
        _approve_and_destroy(cli, gated)


def test_destroy_several_reports_each_on_a_terminal_too(cli: Any) -> None:  # noqa: F811
    ok = _create(cli)
    gated = _create(cli, "--require-approval", "destroy")
    try:
        code, out, err = cli("destroy", gated, ok, "never-was")
        assert code == 1
        assert f"{ok}: destroyed" in out
        assert "never-was: no such sandbox (nothing to do)" in out
        assert f"hutch: {gated}: approval_required" in err and "hint: " in err
        assert "2 of 3 done, 1 failed" in err
        assert cli.live_ids() == {gated}
    finally:
        _approve_and_destroy(cli, gated)


def test_destroy_one_sandbox_that_fails_prints_the_error_document(cli: Any) -> None:  # noqa: F811
    gated = _create(cli, "--require-approval", "destroy")
    try:
        code, doc = cli.json("destroy", gated, "--json")
        assert code == 1
        assert_json_error(doc, "approval_required")
    finally:
        _approve_and_destroy(cli, gated)


def test_destroy_a_is_destroy_all(cli: Any) -> None:  # noqa: F811
    one = _create(cli)
    code, results = cli.json("destroy", "-a", "--json")
    assert code == 0 and [r["sandbox"] for r in results] == [one]
    assert cli.live_ids() == set()
