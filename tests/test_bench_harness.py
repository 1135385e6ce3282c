"""bench/report.py renders the results table and judges the targets (no timing here)."""

from __future__ import annotations

import importlib.util
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
