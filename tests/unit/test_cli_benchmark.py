"""hutch benchmark: every metric sampled, and nothing left behind, also when interrupted.

The client is a stub that keeps its sandboxes in a dict: no daemon, and no timing is judged.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from hutch.cli.benchmark import LABEL, METRICS, Suite, benchmark
from hutch.cli.common import Ctx
from hutch.config import Settings


class StubClient:
    """The slice of :class:`hutch.client.Client` the benchmark uses."""

    def __init__(self, settings: Settings, interrupt_at: int | None = None, sig: int = signal.SIGINT) -> None:
        self.settings = settings
        self.live: dict[str, dict[str, Any]] = {}
        self.creates = 0
        self.interrupt_at = interrupt_at
        self.sig = sig
        self.lock = threading.Lock()

    def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.creates += 1
            n = self.creates
            sid = f"sbx_{n:04d}"
            self.live[sid] = {"id": sid, "state": "running", "spec": spec}
        if n == self.interrupt_at:
            # The daemon made it, but the caller never sees the id: only the label finds it.
            os.kill(os.getpid(), self.sig)
        return {"id": sid, "state": "running"}

    def exec(self, ref: str, req: dict[str, Any]) -> dict[str, Any]:
        assert ref in self.live and req["command"] == ["true"]
        return {"exit_code": 0, "status": "completed"}

    def destroy(self, ref: str) -> dict[str, Any]:
        with self.lock:
            existed = self.live.pop(ref, None) is not None
        return {"sandbox": ref, "destroyed": True, "existed": existed}

    def list(self, include_all: bool = False) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.live.values())


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.load(home=tmp_path / "home", provider="fake")


def run_command(client: StubClient, *args: str) -> int:
    ctx = Ctx()
    ctx._client = client  # type: ignore[assignment]
    try:
        benchmark.main(args=list(args), obj=ctx, standalone_mode=False)
    except SystemExit as done:
        return int(done.code or 0)
    return 0


def test_a_round_samples_every_metric_and_destroys_what_it_made(settings: Settings) -> None:
    client = StubClient(settings)
    suite = Suite(client, {"provider": "fake"}, concurrency=4, progress=False)  # type: ignore[arg-type]
    sample = suite.round()
    assert set(sample) == set(METRICS)
    assert all(ms >= 0 for ms in sample.values())
    assert client.creates == 2 + 4
    assert client.live == {} and suite.ids == set()


def test_json_report(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    client = StubClient(settings)
    assert run_command(client, "--iterations", "3", "--concurrency", "2", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["provider"] == "fake" and report["iterations"] == 3 and report["concurrency"] == 2
    assert set(report["metrics"]) == set(METRICS)
    for metric in report["metrics"].values():
        assert metric["iterations"] == 3 and len(metric["samples_ms"]) == 3
        assert metric["min"] <= metric["median"] <= metric["p95"] <= metric["max"]
    assert report["metrics"]["concurrent"]["label"] == "2 concurrent creates (until all created)"
    assert client.creates == 4 * (3 + 1)  # one warm-up round
    assert client.live == {}


def test_table_report(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(StubClient(settings), "--iterations", "1", "--concurrency", "1") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["METRIC", "MEDIAN", "MS"]
    assert "exec round trip" in out and "1 concurrent creates (until all created)" in out


def test_sandboxes_carry_the_run_label(settings: Settings) -> None:
    client = StubClient(settings)
    suite = Suite(client, {"provider": "fake", "labels": {"team": "x"}}, concurrency=1, progress=False)  # type: ignore[arg-type]
    suite.create()
    (rec,) = client.list()
    assert rec["spec"]["labels"] == {"team": "x", LABEL: suite.token}
    assert suite.cleanup() == [] and client.live == {}


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("at", [1, 2, 5])  # the cold create, the one-shot run, inside a concurrent batch
def test_an_interrupt_leaves_nothing_behind(settings: Settings, sig: int, code: int, at: int) -> None:
    client = StubClient(settings, interrupt_at=at, sig=sig)
    before = signal.getsignal(signal.SIGTERM)
    assert run_command(client, "--iterations", "5", "--concurrency", "5") == code
    assert client.live == {}
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


def test_zero_iterations_is_a_usage_error(settings: Settings) -> None:
    import click

    with pytest.raises(click.BadParameter):
        run_command(StubClient(settings), "--iterations", "0")


def test_summary_statistics() -> None:
    from hutch.cli.benchmark import summarize

    assert summarize([3.0, 1.0, 2.0]) == {"median": 2.0, "p95": 3.0, "min": 1.0, "max": 3.0, "iterations": 3}
    assert summarize([4.0, 1.0, 2.0, 3.0])["median"] == 2.5
    assert summarize([float(i) for i in range(1, 101)])["p95"] == 95.0  # nearest rank
    assert summarize([7.0])["median"] == 7.0
