"""The regression guard: fail only on gross regressions, judged against baselines from the same run.

    python bench/run.py --quick --guard     # exits 1 when a check fails

Every check is a ratio of two numbers measured in the same run, interleaved, on the same
machine: hutch's median over a baseline's median. Absolute times are never judged, so a
slow or busy machine (CI, a laptop on battery) slows both sides and passes. The limits are
generous on purpose, about 3x above the ratios measured when the guard was written (see
docs/benchmarks.md): the guard catches a new import on the CLI path, a lost vfork, an
exec path that starts waiting on a timer; the targets in report.py judge the rest.
Standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Measure = Callable[[dict[str, Any]], float | None]


def latency(key: str) -> Measure:
    """Median of an interleaved latency metric (ms)."""

    def measure(results: dict[str, Any]) -> float | None:
        samples = (results.get("metrics", {}).get(key) or {}).get("samples_ms")
        return float(statistics.median(samples)) if samples else None

    return measure


def concurrent(side: str) -> Measure:
    """Median wall time (ms) of one batch of concurrent starts: ``hutch`` creates or ``bare_bwrap`` runs."""

    def measure(results: dict[str, Any]) -> float | None:
        samples = ((results.get("concurrent") or {}).get(side) or {}).get("samples_ms")
        return float(statistics.median(samples)) if samples else None

    return measure


def throughput(side: str) -> Measure:
    """Median MB/s of the stdout throughput run: ``hutch`` or ``raw_pipe``."""

    def measure(results: dict[str, Any]) -> float | None:
        row = (results.get("throughput") or {}).get(side) or {}
        value = row.get("median_mb_s")
        return float(value) if value else None

    return measure


def egress(kind: str) -> Measure:
    """Median ms per request of one egress path: ``direct`` or ``proxy_connect`` (or ``proxy_http``)."""

    def measure(results: dict[str, Any]) -> float | None:
        row = ((results.get("egress") or {}).get("latency") or {}).get(kind) or {}
        samples = row.get("samples_ms")
        return float(statistics.median(samples)) if samples else None

    return measure


@dataclass(frozen=True)
class Check:
    name: str
    measured: str  # what the numerator is, for the report
    baseline_name: str
    value: Measure
    baseline: Measure
    limit: float
    at_least: bool = False  # True: the ratio must stay >= limit (throughput); else <= limit

    def judge(self, results: dict[str, Any]) -> dict[str, Any]:
        value, base = self.value(results), self.baseline(results)
        ratio = None if value is None or not base else value / base
        ok = None if ratio is None else (ratio >= self.limit if self.at_least else ratio <= self.limit)
        rule = f"{'>=' if self.at_least else '<='} {self.limit:g}x {self.baseline_name}"
        return {"check": self.name, "value": value, "baseline": base, "ratio": ratio, "rule": rule, "ok": ok}


CHECKS = (
    Check("exec round trip", "SDK exec", "bare true", latency("sdk_exec"), latency("bare_true"), 20.0),
    Check(
        "create -> first result",
        "SDK create + exec",
        "bare bwrap",
        latency("sdk_create_first"),
        latency("bare_bwrap"),
        25.0,
    ),
    Check("CLI exec", "hutch exec", "bare bwrap", latency("cli_exec"), latency("bare_bwrap"), 60.0),
    Check("CLI run", "hutch run", "bare bwrap", latency("cli_run"), latency("bare_bwrap"), 100.0),
    Check(
        "concurrent creates",
        "N concurrent creates",
        "N concurrent bare bwraps",
        concurrent("hutch"),
        concurrent("bare_bwrap"),
        25.0,
    ),
    Check(
        "stdout throughput",
        "hutch MB/s",
        "raw pipe MB/s",
        throughput("hutch"),
        throughput("raw_pipe"),
        0.1,
        at_least=True,
    ),
    Check(
        "egress proxy per request",
        "CONNECT through the proxy",
        "direct connection",
        egress("proxy_connect"),
        egress("direct"),
        12.0,
    ),
)


def evaluate(results: dict[str, Any], checks: tuple[Check, ...] = CHECKS) -> list[dict[str, Any]]:
    """One row per check; ``ok`` is None when either side was not measured (not judged)."""
    return [check.judge(results) for check in checks]


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """A line per failed check; empty when the guard passes."""
    return [
        f"{r['check']}: {r['ratio']:.2f}x, allowed {r['rule']} ({r['value']:.2f} vs {r['baseline']:.2f})"
        for r in rows
        if r["ok"] is False
    ]


def describe(rows: list[dict[str, Any]]) -> list[str]:
    """Human lines for every check, passed, failed or not judged."""
    out = []
    for r in rows:
        if r["ok"] is None:
            out.append(f"guard n/a    {r['check']}: not measured in this run")
        else:
            mark = "guard ok  " if r["ok"] else "guard FAIL"
            out.append(f"{mark}   {r['check']}: {r['ratio']:.2f}x (allowed {r['rule']})")
    return out
