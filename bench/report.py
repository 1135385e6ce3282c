"""Render a results JSON from ``bench/run.py`` as Markdown, and put it into docs/benchmarks.md.

    python bench/report.py                       # newest file in bench/results/
    python bench/report.py bench/results/X.json  # a given file
    python bench/report.py X.json --stdout       # print, do not touch the docs

The targets live here (``TARGETS``) and are evaluated from the samples, so the harness
and the page always agree. Standard library only.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "benchmarks.md"
START = "<!-- results:start -->"
END = "<!-- results:end -->"
SECTIONS = (
    "latency",
    "cpu",
    "concurrency",
    "pool",
    "memory",
    "throughput",
    "egress",
)  # bench/run.py --only; memory may be skipped

# metric key -> (label, kind); kind "baseline" rows are the denominators of the ratios.
LATENCY = {
    "bare_true": ("bare `subprocess.run(['true'])`", "baseline"),
    "bare_python": ("bare `python -c pass` (the interpreter the `hutch` script runs on)", "baseline"),
    "bare_bwrap": ("bare hardened `bwrap ... true`", "baseline"),
    "sdk_create_first": ("SDK `Sandbox.create()` + first `exec(['true'])`", "hutch"),
    "sdk_create_first_pool": ("SDK create + first exec, a pool member ready (the wait untimed)", "hutch"),
    "sdk_create_first_cold": ("SDK create + first exec, cold (one read-only mount: a start the pool cannot serve)", "hutch"),
    "sdk_exec": ("SDK `exec(['true'])` in a live sandbox", "hutch"),
    "sdk_exec_steady": ("SDK `exec(['true'])`, 20 in a row in a live sandbox (a sample: one round's median)", "hutch"),
    "cli_exec": ("CLI `hutch exec SBX -- true` (whole process)", "hutch"),
    "cli_run": ("CLI `hutch run -- true` (whole process)", "hutch"),
    "srt_true": ("sandbox-runtime `srt true` (whole process)", "peer"),
    "podman_run": ("`podman run --rm --runtime runc` busybox `/bin/true`, no network (whole process)", "peer"),
    "podman_exec": ("`podman exec CID /bin/true` (whole process)", "peer"),
    "runsc_do": ("gVisor `runsc --network=none do /bin/true` (whole process)", "peer"),
    "runc_run": ("`runc run` of a busybox bundle's `/bin/true` (whole process)", "peer"),
    "swerex_exec": ("SWE-ReX `LocalRuntime.execute(['true'])` (no isolation)", "peer"),
    "swerex_remote_exec": ("SWE-ReX `RemoteRuntime.execute(['true'])`, local server (no isolation)", "peer"),
    "swerex_session": ("SWE-ReX `run_in_session(BashAction('true'))` (no isolation)", "peer"),
}

# Published figures of hosted peers, NOT measured here (independent benchmark, 2026-04).
PEERS = (("Daytona", 0.11), ("E2B", 0.44), ("Modal", 2.66))


def p95(samples: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def summarize(samples: list[float]) -> dict[str, float | int]:
    return {
        "median": statistics.median(samples),
        "p95": p95(samples),
        "min": min(samples),
        "max": max(samples),
        "iterations": len(samples),
    }


def _median(results: dict[str, Any], key: str) -> float | None:
    metric = results.get("metrics", {}).get(key)
    if not metric or not metric.get("samples_ms"):
        return None
    return float(statistics.median(metric["samples_ms"]))


def _memory(results: dict[str, Any]) -> tuple[float, int] | None:
    """Host memory per idle sandbox (MiB) at the largest count measured."""
    runs = results.get("memory") or []
    if not runs:
        return None
    biggest = max(runs, key=lambda r: r["count"])
    return float(biggest["meminfo_per_sandbox_mib"]), int(biggest["count"])


def _concurrent(results: dict[str, Any], side: str = "hutch") -> tuple[float, int] | None:
    """Median ms until all of one batch of concurrent creates returned, and the batch size."""
    conc = results.get("concurrent")
    if not conc or not conc.get(side, {}).get("samples_ms"):
        return None
    return float(statistics.median(conc[side]["samples_ms"])), int(conc["count"])


def _egress_median(results: dict[str, Any], kind: str) -> float | None:
    """Median ms per request of one egress path: ``direct``, ``proxy_http`` or ``proxy_connect``."""
    row = ((results.get("egress") or {}).get("latency") or {}).get(kind) or {}
    samples = row.get("samples_ms")
    return float(statistics.median(samples)) if samples else None


def _throughput_ratio(results: dict[str, Any]) -> float | None:
    tp = results.get("throughput")
    if not tp:
        return None
    return float(tp["hutch"]["median_mb_s"] / tp["raw_pipe"]["median_mb_s"])


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measure: Callable[[dict[str, Any]], tuple[float | None, str]]
    ok: Callable[[float], bool]


def _ms(key: str) -> Callable[[dict[str, Any]], tuple[float | None, str]]:
    def measure(results: dict[str, Any]) -> tuple[float | None, str]:
        value = _median(results, key)
        return value, "n/a" if value is None else f"{value:.1f} ms median"

    return measure


def _create_ratio(results: dict[str, Any]) -> tuple[float | None, str]:
    first, bwrap = _median(results, "sdk_create_first"), _median(results, "bare_bwrap")
    if first is None or not bwrap:
        return None, "n/a"
    return first / bwrap, f"{first / bwrap:.1f}x bare bwrap ({first:.1f} / {bwrap:.1f} ms)"


def _mem(results: dict[str, Any]) -> tuple[float | None, str]:
    found = _memory(results)
    if found is None:
        return None, "n/a"
    value, count = found
    return value, f"{value:.2f} MiB per sandbox ({count} idle sandboxes, MemTotal - MemAvailable)"


def _conc(results: dict[str, Any]) -> tuple[float | None, str]:
    found = _concurrent(results)
    if found is None or found[1] < 100:  # the target is about 100 at once
        return None, "n/a" if found is None else f"not judged: {found[1]} at once, the target is for 100"
    ms, count = found
    return ms, f"{ms / 1000:.2f} s median for {count} at once"


def _egress_overhead(kind: str) -> Callable[[dict[str, Any]], tuple[float | None, str]]:
    """Proxy median minus direct median, both measured in the same run (ms per request)."""

    def measure(results: dict[str, Any]) -> tuple[float | None, str]:
        proxy, direct = _egress_median(results, kind), _egress_median(results, "direct")
        if proxy is None or direct is None:
            return None, "n/a"
        return proxy - direct, f"{proxy - direct:.2f} ms ({proxy:.2f} ms via the proxy, {direct:.2f} ms direct)"

    return measure


def _tp(results: dict[str, Any]) -> tuple[float | None, str]:
    ratio = _throughput_ratio(results)
    return ratio, "n/a" if ratio is None else f"{ratio * 100:.0f}% of a raw pipe"


def _pool_median(results: dict[str, Any], key: str) -> float | None:
    row = (results.get("pool") or {}).get(key) or {}
    return float(statistics.median(row["samples_ms"])) if row.get("samples_ms") else None


def _pool_first(results: dict[str, Any]) -> tuple[float | None, str]:
    value = _pool_median(results, "create_first")
    return value, "n/a" if value is None else f"{value:.1f} ms median"


def _pool_ratio(results: dict[str, Any]) -> tuple[float | None, str]:
    first, bwrap = _pool_median(results, "create_first"), _pool_median(results, "bare_bwrap")
    if first is None or not bwrap:
        return None, "n/a"
    return first / bwrap, f"{first / bwrap:.1f}x bare bwrap ({first:.1f} / {bwrap:.1f} ms, the same rounds)"


def _pool_conc(results: dict[str, Any]) -> tuple[float | None, str]:
    conc = (results.get("pool") or {}).get("concurrent") or {}
    if not conc.get("samples_ms") or conc.get("count", 0) < 100:
        return None, "n/a" if not conc.get("samples_ms") else f"not judged: {conc['count']} at once, the target is for 100"
    ms = float(statistics.median(conc["samples_ms"]))
    return ms, f"{ms / 1000:.2f} s median for {conc['count']} at once from a pool of {conc['count']}"


TARGETS = (
    Target("create -> first result", "<= 20 ms median", _ms("sdk_create_first"), lambda v: v <= 20.0),
    Target("create -> first result vs bare bwrap", "<= 3.5x bare bwrap", _create_ratio, lambda v: v <= 3.5),
    Target("exec round trip", "<= 3 ms median", _ms("sdk_exec"), lambda v: v <= 3.0),
    Target("CLI exec", "<= 150 ms median", _ms("cli_exec"), lambda v: v <= 150.0),
    Target("100 concurrent creates", "< 1 s until all created", _conc, lambda v: v < 1000.0),
    Target("create -> first result from the pool", "<= 15 ms median", _pool_first, lambda v: v <= 15.0),
    Target("create -> first result from the pool vs bare bwrap", "<= 2.5x bare bwrap", _pool_ratio, lambda v: v <= 2.5),
    Target("100 concurrent creates from a pool of 100", "<= 0.5 s until all created", _pool_conc, lambda v: v <= 500.0),
    Target("host memory per idle sandbox", "<= 2 MiB", _mem, lambda v: v <= 2.0),
    Target("stdout throughput", ">= 50% of a raw pipe", _tp, lambda v: v >= 0.5),
    Target(
        "egress proxy overhead per request (absolute-form HTTP)",
        "<= 0.5 ms median over direct",
        _egress_overhead("proxy_http"),
        lambda v: v <= 0.5,
    ),
    Target(
        "egress proxy overhead per request (CONNECT)",
        "<= 0.5 ms median over direct",
        _egress_overhead("proxy_connect"),
        lambda v: v <= 0.5,
    ),
)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: ``met`` is None when the metric was not measured."""
    rows = []
    for t in TARGETS:
        value, text = t.measure(results)
        rows.append(
            {"target": t.name, "goal": t.goal, "value": value, "measured": text, "met": None if value is None else t.ok(value)}
        )
    return rows


def _f(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.1f}x" if base else "n/a"


def _machine(results: dict[str, Any]) -> list[str]:
    m = results.get("machine", {})
    bw = m.get("bwrap", {})
    return [
        f"- Machine: {m.get('cpu_count', '?')} CPUs ({m.get('cpu_model', '?')}), "
        f"{m.get('mem_total_mib', '?')} MiB RAM, kernel {m.get('kernel', '?')}",
        f"- Software: Python {m.get('python', '?')}, hutch {m.get('hutch', '?')}"
        + (f" (commit {m['git_commit'][:10]}" if m.get("git_commit") else "")
        + (", with uncommitted changes in src/" if m.get("git_commit") and m.get("src_dirty") else "")
        + (")" if m.get("git_commit") else "")
        + f", bwrap {bw.get('version', '?')} ({bw.get('source', '?')})",
        f"- Running as root: {'yes' if m.get('root') else 'no'}; cgroup mode: {m.get('cgroup_mode', '?')}"
        + (
            f"; load average {m['loadavg_at_start'][0]:.1f} at the start, {m['loadavg_at_end'][0]:.1f} at the end"
            if m.get("loadavg_at_start") and m.get("loadavg_at_end")
            else ""
        ),
        f"- Run: `{' '.join(results.get('command', []))}` at {results.get('timestamp', '?')}, "
        f"{results.get('mode', '?')} mode"
        + (f", {results.get('warmup', '?')} warm-up rounds discarded" if results.get("metrics") else "")
        + (_egress_rounds(results) if results.get("egress") else ""),
    ]


def _egress_rounds(results: dict[str, Any]) -> str:
    eg = results["egress"]
    return (
        f"; egress: {eg.get('rounds', '?')} rounds after {eg.get('warmup_rounds', '?')} discarded, the first "
        f"{eg.get('warmup_requests_per_batch', '?')} requests of every batch kept apart"
    )


def render(results: dict[str, Any]) -> str:
    """The Markdown for one results dict: machine, latency, memory, throughput, targets, peers."""
    metrics = results.get("metrics", {})
    true_med, bwrap_med = _median(results, "bare_true"), _median(results, "bare_bwrap")
    out = [*_machine(results)]
    partial = markers(results) != (START, END)  # an --only run: only what it measured is judged
    if not partial:
        out += _sibling("goals").render(results)
    if metrics:
        out += [
            "",
            "### Latency (ms, interleaved rounds)",
            "",
            "| what | median | p95 | min | max | n | vs bare true | vs bare bwrap |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
    for key, (label, kind) in LATENCY.items():
        if key not in metrics or not metrics[key].get("samples_ms"):
            continue
        s = summarize(metrics[key]["samples_ms"])
        tag = {"baseline": " (baseline)", "peer": " (peer)"}.get(kind, "")
        out.append(
            f"| {label}{tag} | {_f(s['median'])} | {_f(s['p95'])} | {_f(s['min'])} | {_f(s['max'])} | {s['iterations']} "
            f"| {_ratio(s['median'], true_med)} | {_ratio(s['median'], bwrap_med)} |"
        )
    out += _sibling("cpu").render(results)
    out += _concurrency(results)
    if results.get("memory"):
        out += [
            "",
            "### Host memory per idle sandbox (MiB)",
            "",
            "| idle sandboxes | (MemTotal - MemAvailable) increase / N | summed PSS of its processes / N | processes each |",
            "|---:|---:|---:|---:|",
        ]
        for r in results["memory"]:
            pss = "n/a" if r.get("pss_per_sandbox_mib") is None else f"{r['pss_per_sandbox_mib']:.2f}"
            procs = "n/a" if r.get("processes_per_sandbox") is None else f"{r['processes_per_sandbox']:.1f}"
            out.append(f"| {r['count']} | {r['meminfo_per_sandbox_mib']:.2f} | {pss} | {procs} |")
    tp = results.get("throughput")
    if tp:
        mib = tp["bytes"] / (1 << 20)
        out += [
            "",
            f"### stdout throughput ({mib:.0f} MiB of zeros, `max_output` = {tp['max_output']} bytes)",
            "",
            "| path | median MB/s | median ms | n | vs raw pipe |",
            "|---|---:|---:|---:|---:|",
        ]
        raw = tp["raw_pipe"]["median_mb_s"]
        for key, label in (("raw_pipe", "raw pipe: `subprocess.run(..., stdout=PIPE)`"), ("hutch", "hutch: `sbx.exec([...])`")):
            row = tp[key]
            med = statistics.median(row["samples_ms"])
            out.append(
                f"| {label} | {row['median_mb_s']:.0f} | {_f(med)} | {len(row['samples_ms'])} | {row['median_mb_s'] / raw:.0%} |"
            )
    out += _egress(results)
    out += ["", "### Targets", "", "| target | goal | measured | result |", "|---|---|---|---|"]
    for row in evaluate_targets(results):
        if partial and row["met"] is None:
            continue
        verdict = "not measured" if row["met"] is None else ("**met**" if row["met"] else "**missed**")
        out.append(f"| {row['target']} | {row['goal']} | {row['measured']} | {verdict} |")
    out += _guard(results, partial)
    out += _peers(results)
    if partial:
        return "\n".join(out) + "\n"
    out += [
        "",
        "### Hosted peers: PUBLISHED figures, not measured here",
        "",
        "Create -> first command, medians from an independent benchmark (2026-04). Different machines,",
        "networks and isolation (remote microVMs/containers vs a local namespace sandbox): context, not a race.",
        "",
        "| peer | create -> first command (median, published) | hutch local here (measured) |",
        "|---|---:|---:|",
    ]
    mine = _median(results, "sdk_create_first")
    here = "n/a" if mine is None else f"{mine / 1000:.3f} s"
    for name, seconds in PEERS:
        out.append(f"| {name} (published) | {seconds:.2f} s | {here} |")
    return "\n".join(out) + "\n"


def _egress(results: dict[str, Any]) -> list[str]:
    """Per-request latency through the egress proxy vs direct, and the 100 MiB transfer."""
    eg = results.get("egress") or {}
    lat = eg.get("latency") or {}
    out: list[str] = []
    direct = _egress_median(results, "direct")
    if lat:
        out += [
            "",
            f"### Egress proxy, per request (ms; a new connection per request, {eg.get('requests_per_batch', '?')} requests "
            "per batch, proxy and direct batches alternating)",
            "",
            "| path | median | p95 | min | max | n | overhead (median - direct median) | vs direct |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in ("direct", "proxy_http", "proxy_connect"):
            row = lat.get(kind) or {}
            if not row.get("samples_ms"):
                continue
            s = summarize(row["samples_ms"])
            tag = " (baseline)" if kind == "direct" else ""
            over = "-" if kind == "direct" or direct is None else f"{s['median'] - direct:.2f}"
            out.append(
                f"| {row.get('label', kind)}{tag} | {s['median']:.3f} | {s['p95']:.3f} | {s['min']:.3f} | {s['max']:.3f} "
                f"| {s['iterations']} | {over} | {_ratio(s['median'], direct)} |"
            )
    tp = eg.get("transfer")
    if tp:
        direct_rate = tp["direct"]["median_mb_s"]
        out += [
            "",
            f"### Egress transfer ({tp['bytes'] / (1 << 20):.0f} MiB over one connection, alternating rounds)",
            "",
            "| path | median MB/s | median ms | min ms | max ms | n | vs direct |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in ("direct", "proxy_connect"):
            row = tp[kind]
            ms = row["samples_ms"]
            tag = " (baseline)" if kind == "direct" else ""
            out.append(
                f"| {row.get('label', kind)}{tag} | {row['median_mb_s']:.0f} | {_f(statistics.median(ms))} | {_f(min(ms))} "
                f"| {_f(max(ms))} | {len(ms)} | {row['median_mb_s'] / direct_rate:.0%} |"
            )
    return out


def _concurrency(results: dict[str, Any]) -> list[str]:
    conc = results.get("concurrent")
    if not conc or not conc.get("hutch", {}).get("samples_ms"):
        return []
    base = _concurrent(results, "bare_bwrap")
    out = [
        "",
        f"### {conc['count']} at once (ms until the last one returned, alternating rounds)",
        "",
        "| what | median | min | max | n | vs bare bwraps |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for side, tag in (("bare_bwrap", " (baseline)"), ("hutch", "")):
        row = conc.get(side) or {}
        if not row.get("samples_ms"):
            continue
        s = summarize(row["samples_ms"])
        out.append(
            f"| {row.get('label', side)}{tag} | {_f(s['median'])} | {_f(s['min'])} | {_f(s['max'])} | {s['iterations']} "
            f"| {_ratio(s['median'], base[0] if base else None)} |"
        )
    return out


def _sibling(name: str) -> Any:
    """bench/NAME.py, loaded by path (this module is also loaded by path, e.g. in tests)."""
    import importlib.util

    key = f"bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _guard(results: dict[str, Any], partial: bool = False) -> list[str]:
    """The guard's checks, evaluated from the samples with the current limits (like the targets)."""
    if "guard" not in results:  # results from before the guard existed
        return []
    rows = _sibling("guard").evaluate(results)
    out = [
        "",
        "### Regression guard (ratios within this run; `--guard` fails only on these)",
        "",
        "| check | ratio | allowed | result |",
        "|---|---:|---|---|",
    ]
    for r in rows:
        if partial and r.get("ok") is None:
            continue
        ratio = "n/a" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
        verdict = "not measured" if r.get("ok") is None else ("pass" if r["ok"] else "**FAIL**")
        out.append(f"| {r['check']} | {ratio} | {r['rule']} | {verdict} |")
    return out


def _peers(results: dict[str, Any]) -> list[str]:
    """Peers run here (installed into the harness's temp dir), and everything not measured, with why."""
    out: list[str] = []
    measured = [p for p in results.get("peers") or [] if p.get("status") == "measured"]
    if measured:
        out += ["", "### Peers measured here", "", "| peer | version | installed | timed | notes |", "|---|---|---|---|---|"]
        for p in measured:
            notes = "; ".join(str(p[k]) for k in ("isolation", "settings", "runs_as", "helpers") if p.get(k))
            out.append(
                f"| {p['name']} | {p.get('version') or '?'} | {p.get('installed', '?')} | {p.get('timed', '?')} | {notes} |"
            )
    missing = [(str(p["name"]), str(p.get("reason", "?"))) for p in results.get("peers") or [] if p.get("status") != "measured"]
    missing += [(str(n["what"]), str(n["reason"])) for n in results.get("not_measured") or []]
    if missing:
        out += ["", "### Not measured", "", "| what | why |", "|---|---|"]
        out += [f"| {what} | not measured: {why} |" for what, why in missing]
    return out


def markers(results: dict[str, Any]) -> tuple[str, str]:
    """The doc's block for these results: the main one, or ``results:SECTION[-SECTION]`` for a run with ``--only``."""
    sections = results.get("sections")
    if not sections or set(sections) | {"memory"} >= set(SECTIONS):  # a full run, maybe with --skip-memory
        return START, END
    name = "-".join(sections)
    return f"<!-- results:{name}:start -->", f"<!-- results:{name}:end -->"


def update_doc(doc: Path, block: str, start: str = START, end: str = END) -> None:
    """Replace what is between the results markers in ``doc``."""
    text = doc.read_text()
    try:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
    except ValueError:
        raise SystemExit(f"{doc} has no {start} ... {end} markers") from None
    doc.write_text(f"{head}{start}\n{block}{end}{tail}")


def newest_result() -> Path:
    files = sorted((HERE / "results").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise SystemExit("no results in bench/results/; run python bench/run.py first")
    return files[-1]


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", type=Path, help="results JSON (default: newest in bench/results/)")
    ap.add_argument("--doc", type=Path, default=DOC, help="Markdown file with the results markers")
    ap.add_argument("--stdout", action="store_true", help="print the Markdown instead of updating the doc")
    args = ap.parse_args(argv)
    path = args.results or newest_result()
    results = json.loads(path.read_text())
    block = render(results)
    try:
        shown = path.resolve().relative_to(HERE.parent)
    except ValueError:
        shown = path
    block = f"Results from [`{shown}`](../{shown}).\n\n{block}" if not args.stdout else block
    if args.stdout:
        sys.stdout.write(block)
    else:
        update_doc(args.doc, block, *markers(results))
        print(f"updated {args.doc} from {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
