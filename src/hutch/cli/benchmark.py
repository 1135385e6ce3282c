"""hutch benchmark: a standard latency suite against a provider, through the normal client.

Every sandbox it makes carries a label with this run's token, so that cleanup also finds
one whose create was cut short before its id came back. Cleanup runs in ``finally``:
after the suite, on an error, on Ctrl-C and on SIGTERM (turned into an exception).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from hutch.cli.common import Ctx, count, emit, json_option, table
from hutch.cli.sandbox import build_spec
from hutch.client import Client
from hutch.errors import HutchError, InternalError
from hutch.wire.build import exec_request

if TYPE_CHECKING:
    from hutch import wire

LABEL = "hutch.benchmark"
METRICS = {
    "cold_create": "cold create",
    "create_first": "create -> first result",
    "exec": "exec round trip",
    "run": "one-shot run (create + exec + destroy)",
    "destroy": "destroy",
    "concurrent": "{n} concurrent creates (until all created)",
}


class Terminated(BaseException):
    """SIGTERM arrived: unwind through the cleanup like Ctrl-C (a BaseException, like KeyboardInterrupt)."""


def summarize(samples: list[float]) -> dict[str, float | int]:
    """Median, nearest-rank p95, min, max (no statistics import: every CLI call imports this module)."""
    ordered = sorted(samples)
    mid = len(ordered) // 2
    return {
        "median": ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2,
        "p95": ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)],  # nearest rank
        "min": ordered[0],
        "max": ordered[-1],
        "iterations": len(ordered),
    }


def _ms(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e6


class Suite:
    def __init__(self, client: Client, spec: wire.SandboxSpec, concurrency: int, progress: bool) -> None:
        self.client = client
        self.token = os.urandom(6).hex()
        self.spec: wire.SandboxSpec = {**spec, "labels": {**spec.get("labels", {}), LABEL: self.token}}
        self.concurrency = concurrency
        self.progress = progress
        self.ids: set[str] = set()
        self.lock = threading.Lock()
        # Completion is tracked with events, not Thread.join: a join cut short by Ctrl-C can
        # mark a live thread as finished (CPython 3.11), and its create would then be missed.
        self.finished: list[threading.Event] = []
        self.gate: threading.Barrier | None = None

    def create(self) -> str:
        sid = str(self.client.create(self.spec)["id"])
        with self.lock:
            self.ids.add(sid)
        return sid

    def destroy(self, sid: str) -> None:
        self.client.destroy(sid)
        with self.lock:
            self.ids.discard(sid)

    def exec(self, sid: str) -> None:
        result = self.client.exec(sid, exec_request(["true"], max_output=4096))
        if result["exit_code"] != 0 or result["status"] != "completed":
            raise InternalError(f"true failed in sandbox {sid}: {result.get('error') or result['status']}")

    def _parallel(self, func: Callable[[], Any], count: int) -> tuple[float, list[Any]]:
        """``count`` threads start ``func`` together; ms until the last returned, and their results."""
        gate = self.gate = threading.Barrier(count + 1)
        results: list[Any] = []
        errors: list[BaseException] = []

        def worker(done: threading.Event) -> None:
            try:
                gate.wait()
                value = func()
            except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)
            else:
                results.append(value)
            finally:
                done.set()

        self.finished = [threading.Event() for _ in range(count)]
        for done in self.finished:
            threading.Thread(target=worker, args=(done,), daemon=True).start()
        gate.wait()
        t0 = time.perf_counter_ns()
        for done in self.finished:
            done.wait()
        t1 = time.perf_counter_ns()
        if errors:
            raise errors[0]
        return _ms(t0, t1), results

    def round(self) -> dict[str, float]:
        """One sample of every metric."""
        out: dict[str, float] = {}
        t0 = time.perf_counter_ns()
        sid = self.create()
        t1 = time.perf_counter_ns()
        self.exec(sid)
        t2 = time.perf_counter_ns()
        self.exec(sid)
        t3 = time.perf_counter_ns()
        self.destroy(sid)
        t4 = time.perf_counter_ns()
        out |= {"cold_create": _ms(t0, t1), "create_first": _ms(t0, t2), "exec": _ms(t2, t3), "destroy": _ms(t3, t4)}
        t0 = time.perf_counter_ns()
        sid = self.create()
        self.exec(sid)
        self.destroy(sid)
        out["run"] = _ms(t0, time.perf_counter_ns())
        out["concurrent"], made = self._parallel(self.create, self.concurrency)
        self._parallel(lambda: self.destroy(made.pop()), len(made))
        return out

    def cleanup(self) -> list[str]:
        """Destroy everything this run made, found by id or by label; returns what could not be destroyed."""
        if self.gate is not None:
            self.gate.abort()  # workers still at the gate (the caller was interrupted there) give up
        for done in self.finished:  # creates in flight finish first, so their ids are known
            done.wait(timeout=60)
        deadline = time.monotonic() + 60
        mine: set[str] = set()
        while True:
            try:
                live = [s for s in self.client.list() if s["spec"].get("labels", {}).get(LABEL) == self.token]
            except HutchError:
                live = []
            mine = {str(s["id"]) for s in live}
            if not any(s["state"] == "creating" for s in live) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        left = []
        for sid in sorted(self.ids | mine):
            try:
                self.destroy(sid)
            except HutchError as exc:
                left.append(f"{sid}: {exc.message}")
        return left


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _shielded() -> Iterator[None]:
    """Cleanup is not cut short by a second Ctrl-C or SIGTERM."""

    def note(_signum: int, _frame: FrameType | None) -> None:
        click.echo("hutch: cleaning up the benchmark's sandboxes, please wait", err=True)

    previous = signal.signal(signal.SIGINT, note), signal.signal(signal.SIGTERM, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _render(report: dict[str, Any]) -> None:
    rows = []
    for m in report["metrics"].values():
        rows.append([m["label"], *(f"{m[k]:.1f}" for k in ("median", "p95", "min", "max")), str(m["iterations"])])
    table(rows, ["metric", "median ms", "p95 ms", "min ms", "max ms", "n"])
    click.echo(f"provider {report['provider']}; {report['warmup']} warm-up round discarded; all sandboxes destroyed")


@click.command()
@click.option("--provider", help="Provider to benchmark (default: the configured one, e.g. local).")
@click.option(
    "--iterations",
    type=count(1, 10000),
    metavar="N",
    default=20,
    show_default=True,
    help="Samples per metric (rounds after one discarded warm-up round).",
)
@click.option(
    "--concurrency",
    type=count(1, 100),
    metavar="N",
    default=10,
    show_default=True,
    help="Sandboxes created at once for the concurrent-creates metric.",
)
@json_option
@click.pass_obj
def benchmark(obj: Ctx, provider: str | None, iterations: int, concurrency: int) -> None:
    """Measure create, exec, run, destroy and concurrent creates; print median, p95, min, max.

    Every sandbox it creates is destroyed at the end, also on Ctrl-C or SIGTERM.
    """
    name = provider or obj.settings.provider
    spec = build_spec(obj, None, None, None, None, (), (), (), None, name)
    progress = sys.stderr.isatty() and not obj.json
    suite = Suite(obj.client, spec, concurrency, progress)
    samples: dict[str, list[float]] = {key: [] for key in METRICS}
    interrupted: BaseException | None = None
    left: list[str] = []
    with _sigterm_raises():
        try:
            for i in range(iterations + 1):
                if progress:
                    click.echo(f"\rhutch benchmark: {'warm-up' if i == 0 else f'round {i}/{iterations}'} ", nl=False, err=True)
                sample = suite.round()
                if i > 0:
                    for key, ms in sample.items():
                        samples[key].append(ms)
        except (KeyboardInterrupt, Terminated) as exc:
            interrupted = exc
        finally:
            if progress:
                click.echo("\rhutch benchmark: cleaning up" + " " * 16, err=True)
            with _shielded():
                left = suite.cleanup()
            for line in left:
                click.echo(f"hutch: benchmark sandbox not destroyed: {line}", err=True)
    if left:
        raise InternalError(f"could not destroy {len(left)} benchmark sandboxes: {'; '.join(left)}", hint="hutch destroy them")
    if interrupted is not None:
        click.echo("hutch: benchmark interrupted; every sandbox it created was destroyed", err=True)
        raise SystemExit(143 if isinstance(interrupted, Terminated) else 130)
    report = {
        "provider": name,
        "iterations": iterations,
        "concurrency": concurrency,
        "warmup": 1,
        "unit": "ms",
        "metrics": {
            key: {"label": label.format(n=concurrency), **summarize(samples[key]), "samples_ms": samples[key]}
            for key, label in METRICS.items()
        },
    }
    emit(report) if obj.json else _render(report)
