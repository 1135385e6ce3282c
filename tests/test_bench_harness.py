"""bench/report.py renders the results table and judges the targets (no timing here)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPORT = Path(__file__).resolve().parents[1] / "bench" / "report.py"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", REPORT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def results(create_ms: float = 80.0) -> dict:
    """A tiny results dict shaped like bench/run.py's output."""
    return {
        "timestamp": "2026-01-01T00:00:00+00:00",
        "command": ["python", "bench/run.py", "--quick"],
        "mode": "quick",
        "warmup": 1,
        "machine": {"cpu_count": 2, "cpu_model": "Test CPU", "kernel": "6.0", "root": True, "cgroup_mode": "v2"},
        "metrics": {
            "bare_true": {"samples_ms": [1.0, 1.0, 1.2]},
            "bare_bwrap": {"samples_ms": [6.0, 5.0, 7.0]},
            "sdk_create_first": {"samples_ms": [create_ms, create_ms + 2, create_ms - 2]},
            "sdk_exec": {"samples_ms": [2.0, 2.5, 1.5]},
            "cli_exec": {"samples_ms": [120.0, 130.0, 110.0]},
        },
        "memory": [{"count": 10, "meminfo_per_sandbox_mib": 4.0, "pss_per_sandbox_mib": 7.5, "processes_per_sandbox": 4.0}],
        "throughput": {
            "bytes": 100 << 20,
            "max_output": 1 << 20,
            "raw_pipe": {"samples_ms": [100.0], "median_mb_s": 1000.0},
            "hutch": {"samples_ms": [400.0], "median_mb_s": 250.0},
        },
    }


def target_rows(markdown: str) -> dict[str, str]:
    """target name -> its result cell, from the rendered targets table."""
    section = markdown.split("### Targets", 1)[1].split("###", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("target", "---"):
            rows[cells[0]] = cells[3]
    return rows


def test_renders_latency_table_with_ratios(report: ModuleType) -> None:
    md = report.render(results())
    assert "| what | median | p95 | min | max | n | vs bare true | vs bare bwrap |" in md
    create = next(line for line in md.splitlines() if line.startswith("| SDK `Sandbox.create()`"))
    cells = [c.strip() for c in create.strip("|").split("|")]
    assert cells[1:6] == ["80.0", "82.0", "78.0", "82.0", "3"]
    assert cells[6:] == ["80.0x", "13.3x"]  # 80 / 1.0 and 80 / 6.0
    assert "| bare hardened `bwrap ... true` (baseline) |" in md
    assert "| 10 | 4.00 | 7.50 | 4.0 |" in md


def test_missed_and_met_targets(report: ModuleType) -> None:
    rows = target_rows(report.render(results()))
    assert rows["create -> first result"] == "**missed**"
    assert rows["create -> first result vs bare bwrap"] == "**missed**"
    assert rows["exec round trip"] == "**met**"
    assert rows["CLI exec"] == "**met**"
    assert rows["host memory per idle sandbox"] == "**missed**"
    assert rows["stdout throughput"] == "**missed**"  # 25% of a raw pipe


def test_fast_create_meets_its_targets(report: ModuleType) -> None:
    rows = target_rows(report.render(results(create_ms=15.0)))
    assert rows["create -> first result"] == "**met**"
    assert rows["create -> first result vs bare bwrap"] == "**met**"


def test_unmeasured_metric_is_not_judged(report: ModuleType) -> None:
    data = results()
    del data["throughput"]
    rows = {r["target"]: r["met"] for r in report.evaluate_targets(data)}
    assert rows["stdout throughput"] is None
    assert target_rows(report.render(data))["stdout throughput"] == "not measured"


def test_published_peers_are_labeled_as_such(report: ModuleType) -> None:
    md = report.render(results())
    peers = md.split("PUBLISHED figures, not measured here", 1)[1]
    assert "| Daytona (published) | 0.11 s |" in peers
    assert "| E2B (published) | 0.44 s |" in peers
    assert "| Modal (published) | 2.66 s |" in peers


def test_update_doc_replaces_only_between_markers(report: ModuleType, tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"intro\n{report.START}\nold table\n{report.END}\noutro\n")
    report.update_doc(doc, "new table\n")
    assert doc.read_text() == f"intro\n{report.START}\nnew table\n{report.END}\noutro\n"
    doc.write_text("no markers here\n")
    with pytest.raises(SystemExit):
        report.update_doc(doc, "x\n")


def test_concurrency_target_and_not_measured_rows(report: ModuleType) -> None:
    data = results()
    data["concurrent"] = {
        "count": 100,
        "hutch": {"label": "100 concurrent creates", "samples_ms": [3000.0, 3200.0, 2800.0]},
        "bare_bwrap": {"label": "100 concurrent bare bwraps", "samples_ms": [400.0, 350.0, 380.0]},
    }
    data["peers"] = [
        {"name": "sandbox-runtime", "status": "measured", "version": "1.0", "installed": "npm", "timed": "srt true"},
        {"name": "runc", "status": "not measured", "reason": "runc is not installed on this machine"},
    ]
    data["not_measured"] = [{"what": "snapshot", "reason": "feature not built yet"}]
    md = report.render(data)
    assert target_rows(md)["100 concurrent creates"] == "**missed**"
    assert "| 100 concurrent creates | 3000.0 | 2800.0 | 3200.0 | 3 | 7.9x |" in md  # 3000 / 380
    assert "| runc | not measured: runc is not installed on this machine |" in md
    assert "| snapshot | not measured: feature not built yet |" in md
    assert "| sandbox-runtime | 1.0 | npm | srt true |" in md
    data["concurrent"]["hutch"]["samples_ms"] = [900.0]
    assert target_rows(report.render(data))["100 concurrent creates"] == "**met**"
    data["concurrent"]["count"] = 10  # the target is about 100 at once
    assert target_rows(report.render(data))["100 concurrent creates"] == "not measured"


# -- the regression guard (bench/guard.py), on synthetic results: no timing here ----------

GUARD = Path(__file__).resolve().parents[1] / "bench" / "guard.py"


@pytest.fixture(scope="module")
def guard() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_guard", GUARD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def healthy(scale: float = 1.0) -> dict:
    """Ratios like the ones measured when the guard was written; ``scale`` slows every time alike."""

    def ms(*values: float) -> dict:
        return {"samples_ms": [v * scale for v in values]}

    return {
        "metrics": {
            "bare_true": ms(0.9, 1.0, 1.1),
            "bare_python": ms(20.0, 22.0, 25.0),
            "bare_bwrap": ms(6.0, 6.5, 7.0),
            "sdk_create_first": ms(55.0, 57.0, 60.0),
            "sdk_exec": ms(5.5, 6.0, 6.5),
            "cli_exec": ms(110.0, 120.0, 130.0),
            "cli_run": ms(150.0, 170.0, 190.0),
        },
        "concurrent": {"count": 100, "hutch": ms(3000.0, 3200.0), "bare_bwrap": ms(360.0, 380.0)},
        "throughput": {"hutch": {"median_mb_s": 900.0 / scale}, "raw_pipe": {"median_mb_s": 1000.0 / scale}},
        "egress": {"latency": {"direct": ms(0.25, 0.28, 0.3), "proxy_connect": ms(1.0, 1.1, 1.4)}},
        "cpu": {"metrics": CPU_HEALTHY | {k: ms(*v["samples_ms"]) for k, v in CPU_HEALTHY.items()}},
    }


# CPU medians like the ones measured under load when the CPU checks were set (ms per call).
CPU_HEALTHY = {
    "cpu_true": {"samples_ms": [0.8, 1.0, 1.2]},
    "cpu_python": {"samples_ms": [10.0, 11.0, 12.0]},
    "cpu_sdk_exec": {"samples_ms": [1.15, 1.3, 1.45]},  # a run the idle helper supervises, over a kept connection
    "cpu_bwrap_loop": {"samples_ms": [2.0, 2.1, 2.4]},  # started by the native launcher, as hutch starts bwrap
    "cpu_proc_walk": {"samples_ms": [0.4, 0.5, 0.6]},
    "cpu_sdk_create": {"samples_ms": [11.5, 12.5, 13.5]},  # no Python agent start for the first run
    "cpu_cli_exec": {"samples_ms": [16.5, 18.0, 19.5]},  # the plain exec path through bin/hutch (no click, re, json ...)
    "cpu_cli_run": {"samples_ms": [19.5, 21.0, 23.0]},  # the plain run path (the same)
}


def test_guard_passes_on_healthy_ratios(guard: ModuleType) -> None:
    rows = guard.evaluate(healthy())
    assert [r["ok"] for r in rows] == [True] * len(guard.CHECKS)
    assert guard.failures(rows) == []


def test_guard_ignores_absolute_times(guard: ModuleType) -> None:
    """A machine 20x slower (or faster) everywhere passes: only ratios are judged."""
    for scale in (0.05, 20.0):
        assert guard.failures(guard.evaluate(healthy(scale))) == []


@pytest.mark.parametrize(
    ("section", "key", "factor", "check"),
    [
        ("metrics", "sdk_exec", 25.0, "exec round trip"),  # fastest 137.5 / 0.9 ms: 153x bare true > 150x
        ("metrics", "sdk_create_first", 7.0, "create -> first result"),  # 64x bare bwrap > 60x
        ("metrics", "cli_exec", 10.0, "CLI exec"),  # 55x python -c pass > 50x
        ("metrics", "cli_run", 11.0, "CLI run"),  # 82.5x python -c pass > 75x
        ("concurrent", "hutch", 6.5, "concurrent creates"),  # 54x > 50x
    ],
)
def test_guard_fails_on_a_gross_regression(guard: ModuleType, section: str, key: str, factor: float, check: str) -> None:
    data = healthy()
    data[section][key]["samples_ms"] = [v * factor for v in data[section][key]["samples_ms"]]
    failed = guard.failures(guard.evaluate(data))
    assert len(failed) == 1 and failed[0].startswith(f"{check}: ")


def test_guard_fails_when_the_egress_proxy_gets_grossly_slower(guard: ModuleType) -> None:
    data = healthy()
    data["egress"]["latency"]["proxy_connect"]["samples_ms"] = [16.0, 17.0, 18.0]  # fastest 64x direct > 60x
    failed = guard.failures(guard.evaluate(data))
    assert len(failed) == 1 and failed[0].startswith("egress proxy per request: ")
    del data["egress"]
    assert {r["check"]: r["ok"] for r in guard.evaluate(data)}["egress proxy per request"] is None


def test_guard_fails_when_throughput_collapses(guard: ModuleType) -> None:
    data = healthy()
    data["throughput"]["hutch"]["median_mb_s"] = 40.0  # 4% of the raw pipe
    failed = guard.failures(guard.evaluate(data))
    assert len(failed) == 1 and failed[0].startswith("stdout throughput: 0.04x, allowed >= 0.05x")


def test_guard_does_not_judge_what_was_not_measured(guard: ModuleType) -> None:
    data = healthy()
    del data["concurrent"], data["throughput"], data["metrics"]["bare_bwrap"], data["metrics"]["bare_python"]
    rows = {r["check"]: r["ok"] for r in guard.evaluate(data)}
    assert rows["exec round trip"] is True
    assert rows["create -> first result"] is None and rows["CLI exec"] is None
    assert rows["concurrent creates"] is None and rows["stdout throughput"] is None
    assert guard.failures(guard.evaluate(data)) == []
    assert any(line.startswith("guard n/a") for line in guard.describe(guard.evaluate(data)))


def test_guard_table_is_evaluated_from_the_samples(report: ModuleType) -> None:
    data = results()
    assert "### Regression guard" not in report.render(data)  # results from before the guard
    data["guard"] = [{"check": "stale", "rule": "<= 1x", "ratio": 9.0, "ok": False}]  # recomputed, not trusted
    md = report.render(data)
    assert "| exec round trip | 1.50x | <= 150x bare true | pass |" in md  # fastest: 1.5 / 1.0 ms
    assert "| concurrent creates | n/a |" in md and "stale" not in md


# -- the egress proxy against a direct connection -------------------------------------------


def egress(proxy_ms: float = 0.7) -> dict:
    """Results of ``bench/run.py --only egress``: direct at 0.25 ms, the proxy at ``proxy_ms`` (median)."""
    return {
        "timestamp": "2026-01-01T00:00:00+00:00",
        "command": ["python", "bench/run.py", "--only", "egress"],
        "mode": "full",
        "sections": ["egress"],
        "machine": {"cpu_count": 2},
        "guard": [],  # recomputed from the samples when rendered
        "egress": {
            "rounds": 2,
            "warmup_rounds": 1,
            "requests_per_batch": 3,
            "warmup_requests_per_batch": 1,
            "latency": {
                "direct": {"label": "direct", "samples_ms": [0.2, 0.25, 0.3]},
                "proxy_http": {"label": "absolute-form", "samples_ms": [proxy_ms - 0.1, proxy_ms, proxy_ms + 0.1]},
                "proxy_connect": {"label": "CONNECT", "samples_ms": [proxy_ms, proxy_ms + 0.1, proxy_ms + 0.2]},
            },
            "transfer": {
                "bytes": 100 << 20,
                "direct": {"label": "direct", "samples_ms": [40.0, 42.0], "median_mb_s": 2000.0},
                "proxy_connect": {"label": "CONNECT", "samples_ms": [150.0, 160.0], "median_mb_s": 500.0},
            },
        },
    }


def test_egress_overhead_is_judged_against_the_direct_median(report: ModuleType) -> None:
    rows = target_rows(report.render(egress(0.7)))
    assert rows["egress proxy overhead per request (absolute-form HTTP)"] == "**met**"  # 0.7 - 0.25 = 0.45 ms
    assert rows["egress proxy overhead per request (CONNECT)"] == "**missed**"  # 0.8 - 0.25 = 0.55 ms
    assert "exec round trip" not in rows  # an --only egress run judges only what it measured
    rows = target_rows(report.render(egress(1.5)))
    assert rows["egress proxy overhead per request (absolute-form HTTP)"] == "**missed**"
    assert target_rows(report.render(results()))["egress proxy overhead per request (CONNECT)"] == "not measured"


def test_egress_tables(report: ModuleType) -> None:
    md = report.render(egress(0.7))
    assert "### Latency" not in md and "Hosted peers" not in md  # not measured in an --only egress run
    assert "| egress proxy per request | 3.50x | <= 60x direct connection | pass |" in md  # fastest: 0.7 / 0.2 ms
    assert "| exec round trip |" not in md
    assert "| direct (baseline) | 0.250 | 0.300 | 0.200 | 0.300 | 3 | - | 1.0x |" in md
    assert "| CONNECT | 0.800 | 0.900 | 0.700 | 0.900 | 3 | 0.55 | 3.2x |" in md
    assert "| CONNECT | 500 | 155.0 | 150.0 | 160.0 | 2 | 25% |" in md


def test_a_partial_run_goes_into_its_own_block(report: ModuleType, tmp_path: Path) -> None:
    assert report.markers(egress()) == ("<!-- results:egress:start -->", "<!-- results:egress:end -->")
    assert report.markers(results()) == (report.START, report.END)  # no sections recorded: the main block
    full = {"sections": ["latency", "cpu", "concurrency", "pool", "throughput", "egress"]}  # --skip-memory is still a full run
    assert report.markers(full) == (report.START, report.END)
    doc = tmp_path / "benchmarks.md"
    start, end = report.markers(egress())
    doc.write_text(f"{report.START}\nmain\n{report.END}\n{start}\nold\n{end}\n")
    report.update_doc(doc, "new\n", start, end)
    assert doc.read_text() == f"{report.START}\nmain\n{report.END}\n{start}\nnew\n{end}\n"


# -- the CPU checks: tight enough for a 2x regression, loose enough for noise ---------------


@pytest.mark.parametrize(
    ("key", "check"),
    [
        ("cpu_sdk_exec", "exec round trip (CPU)"),
        ("cpu_sdk_create", "create -> first result (CPU)"),
        ("cpu_cli_exec", "CLI exec (CPU)"),
        ("cpu_cli_run", "CLI run (CPU)"),
    ],
)
def test_guard_cpu_check_fails_on_twice_the_cpu_and_passes_noise(guard: ModuleType, key: str, check: str) -> None:
    for factor, fails in ((1.3, False), (2.0, True)):
        data = healthy()
        data["cpu"]["metrics"][key]["samples_ms"] = [v * factor for v in data["cpu"]["metrics"][key]["samples_ms"]]
        failed = guard.failures(guard.evaluate(data))
        assert [f.split(":")[0] for f in failed] == ([check] if fails else []), (factor, failed)


def test_guard_create_baseline_grows_with_the_machine(guard: ModuleType) -> None:
    """A create walks /proc: on a machine with thousands of processes both sides grow, and the check holds."""
    data = healthy()
    data["cpu"]["metrics"]["cpu_proc_walk"]["samples_ms"] = [118.0, 120.0, 125.0]
    data["cpu"]["metrics"]["cpu_sdk_create"]["samples_ms"] = [150.0, 156.0, 190.0]
    rows = {r["check"]: r for r in guard.evaluate(data)}
    assert rows["create -> first result (CPU)"]["ok"] is True
    assert rows["create -> first result (CPU)"]["baseline"] == pytest.approx(2.1 + 120.0)


GOALS = Path(__file__).resolve().parents[1] / "bench" / "goals.py"


def test_goal_tables_judge_every_row_from_the_samples(report: ModuleType) -> None:
    goals = report._sibling("goals")
    data = results()
    data["metrics"] |= {
        "bare_python": {"samples_ms": [20.0, 25.0, 30.0]},
        "cli_run": {"samples_ms": [150.0, 170.0, 190.0]},
        "podman_run": {"samples_ms": [250.0, 258.0, 270.0]},
        "podman_exec": {"samples_ms": [190.0, 195.0, 200.0]},
    }
    data["peers"] = [{"name": "gVisor runsc", "status": "not measured", "reason": "runsc is not installed", "keys": ["runsc_do"]}]
    rows = {(r["table"], r["metric"], r.get("peer", "")[:8]): r for r in goals.rows(data)}
    cli = rows[("baselines", "CLI `hutch exec SBX -- true`, whole process", "")]
    assert cli["met"] is (statistics.median(data["metrics"]["cli_exec"]["samples_ms"]) <= 75.0)
    assert rows[("baselines", "host memory per idle sandbox (PSS, 100 idle)", "")]["met"] is None  # no 100 in results()
    podman = rows[("peers", "one-shot `run -- true`", "`podman ")]
    assert podman["ratio"] == pytest.approx(170.0 / 258.0) and podman["met"] is False  # goal <= 0.5
    runsc = rows[("peers", "one-shot `run -- true`", "gVisor `")]
    assert runsc["met"] is None and "not measured: runsc is not installed" in runsc["peer"]
    md = report.render(data)
    assert "### The speed goals: hutch against bare baselines" in md
    assert "| `exec SBX -- true` |" in md


def test_goal_tables_take_the_pool_rows(report: ModuleType) -> None:
    goals = report._sibling("goals")
    data = results(create_ms=30.0)  # the latency section's creates, cold (the harness runs with no pool)
    data["pool"] = {
        "create_first": {"samples_ms": [9.0, 10.0, 11.0]},
        "bare_bwrap": {"samples_ms": [5.0, 6.0, 7.0]},
        "concurrent": {"count": 100, "samples_ms": [400.0, 450.0]},
    }
    data["concurrent"] = {"count": 100, "hutch": {"samples_ms": [1500.0]}, "bare_bwrap": {"samples_ms": [300.0]}}
    rows = {r["metric"]: r for r in goals.rows(data) if r["table"] == "baselines"}
    create = rows["create -> first result (SDK)"]
    assert create["met"] is True and create["hutch"] == "10.0 ms from the pool, 30.0 ms cold"
    conc = rows["100 concurrent creates, all ready"]
    assert conc["met"] is True and "0.42 s from a pool of 100" in conc["hutch"]
    data["pool"]["create_first"]["samples_ms"] = [16.0, 17.0, 18.0]  # > 15 ms from the pool
    assert {r["metric"]: r for r in goals.rows(data)}["create -> first result (SDK)"]["met"] is False


def test_the_one_shot_run_row_shows_the_pooled_run_and_is_judged_cold(report: ModuleType) -> None:
    goals = report._sibling("goals")
    data = results()
    python = 20.0
    data["metrics"]["bare_python"] = {"samples_ms": [python] * 3}
    data["metrics"]["cli_run"] = {"samples_ms": [5 * python] * 3}  # cold: 5x python -c pass
    data["pool"] = {"cli_run": {"samples_ms": [3 * python] * 3}}  # from the pool: 3x
    row = {r["metric"]: r for r in goals.rows(data)}["one-shot `hutch run -- true`, whole process"]
    assert row["hutch"] == f"{goals.ms(5 * python)} cold, {goals.ms(3 * python)} from the pool"
    assert row["met"] is False  # the cold run decides
    data["metrics"]["cli_run"] = {"samples_ms": [3.5 * python] * 3}
    assert {r["metric"]: r for r in goals.rows(data)}["one-shot `hutch run -- true`, whole process"]["met"] is True
