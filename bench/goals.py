"""The speed goals' two tables: hutch against bare baselines, and against the tools a user would pick instead.

Every row is computed from one results file of ``bench/run.py`` (the same run, interleaved
samples, medians), so the tables on docs/benchmarks.md always match the JSON. A row whose
numbers were not measured says so and is not judged. Standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Value = tuple[float | None, str]  # the number judged, and how to show it


def median(results: dict[str, Any], key: str) -> float | None:
    samples = ((results.get("metrics") or {}).get(key) or {}).get("samples_ms")
    return float(statistics.median(samples)) if samples else None


def ms(value: float | None) -> str:
    if value is None:
        return "not measured"
    return f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def pool_median(results: dict[str, Any], key: str) -> float | None:
    """A row of the pool section (bench/pool.py): ``create_first``, ``bare_bwrap`` or ``concurrent``."""
    samples = ((results.get("pool") or {}).get(key) or {}).get("samples_ms")
    return float(statistics.median(samples)) if samples else None


def pool_create(results: dict[str, Any]) -> float | None:
    """create -> first from the pool: the pool section's, else the latency section's pool samples."""
    found = pool_median(results, "create_first")
    return found if found is not None else median(results, "sdk_create_first_pool")


def cold_create(results: dict[str, Any]) -> float | None:
    """create -> first cold: the latency section's cold samples, else its default create when no pool served it."""
    found = median(results, "sdk_create_first_cold")
    if found is not None:
        return found
    return median(results, "sdk_create_first") if median(results, "sdk_create_first_pool") is None else None


def memory_pss(results: dict[str, Any], count: int = 100) -> float | None:
    """PSS per idle sandbox (MiB) at ``count`` idle sandboxes."""
    for row in results.get("memory") or []:
        if row.get("count") == count and row.get("pss_per_sandbox_mib") is not None:
            return float(row["pss_per_sandbox_mib"])
    return None


def concurrent(results: dict[str, Any], side: str) -> float | None:
    conc = results.get("concurrent") or {}
    samples = (conc.get(side) or {}).get("samples_ms")
    return float(statistics.median(samples)) if samples and conc.get("count", 0) >= 100 else None


def egress_overhead(results: dict[str, Any], kind: str) -> tuple[float | None, float | None]:
    lat = (results.get("egress") or {}).get("latency") or {}
    a, b = (lat.get(kind) or {}).get("samples_ms"), (lat.get("direct") or {}).get("samples_ms")
    return (float(statistics.median(a)) if a else None), (float(statistics.median(b)) if b else None)


@dataclass(frozen=True)
class Row:
    metric: str
    hutch: Callable[[dict[str, Any]], Value]
    baseline: Callable[[dict[str, Any]], Value]
    goal: str
    met: Callable[[dict[str, Any]], bool | None]


def _metric(key: str) -> Callable[[dict[str, Any]], Value]:
    return lambda r: (median(r, key), ms(median(r, key)))


def _labelled(key: str, label: str) -> Callable[[dict[str, Any]], Value]:
    return lambda r: (median(r, key), f"{label} {ms(median(r, key))}")


def _judge(check: Callable[[dict[str, Any]], bool | None]) -> Callable[[dict[str, Any]], bool | None]:
    def safe(r: dict[str, Any]) -> bool | None:
        try:
            return check(r)
        except TypeError:  # a None somewhere: not measured
            return None

    return safe


def _ratio(r: dict[str, Any], key: str, base: str) -> float | None:
    a, b = median(r, key), median(r, base)
    return None if a is None or not b else a / b


def _create_met(r: dict[str, Any]) -> bool | None:
    pool, cold, bwrap = pool_create(r), cold_create(r), median(r, "bare_bwrap")
    if cold is None or bwrap is None:
        return None
    ok = cold <= 40.0
    if pool is not None:
        ok = ok and pool <= 15.0 and pool <= 2.5 * (pool_median(r, "bare_bwrap") or bwrap)
    return ok


def _mem(r: dict[str, Any]) -> Value:
    v = memory_pss(r)
    return v, "not measured" if v is None else f"{v:.2f} MiB"


def _mem_base(r: dict[str, Any]) -> Value:
    base = (r.get("memory_bwrap") or {}).get("bwrap_pss_per_sandbox_mib")
    return base, "not measured" if base is None else f"bwrap's own processes {base:.2f} MiB"


def _conc(r: dict[str, Any]) -> Value:
    v = concurrent(r, "hutch")
    shown = "not measured (needs 100 at once)" if v is None else f"{v / 1000:.2f} s cold"
    conc = (r.get("pool") or {}).get("concurrent") or {}
    pooled = pool_median(r, "concurrent")
    if pooled is not None:
        shown += f", {pooled / 1000:.2f} s from a pool of {conc.get('count', '?')}"
    return v, shown


def _conc_met(r: dict[str, Any]) -> bool | None:
    cold = concurrent(r, "hutch")
    if cold is None:
        return None
    conc = (r.get("pool") or {}).get("concurrent") or {}
    pooled = pool_median(r, "concurrent")
    ok = cold <= 2000.0
    if pooled is not None and conc.get("count", 0) >= 100:
        ok = ok and pooled <= 500.0
    return ok


def _conc_base(r: dict[str, Any]) -> Value:
    v = concurrent(r, "bare_bwrap")
    return v, "not measured" if v is None else f"100 bare bwraps {v / 1000:.2f} s"


def _egress(kind: str) -> Callable[[dict[str, Any]], Value]:
    def value(r: dict[str, Any]) -> Value:
        proxy, direct = egress_overhead(r, kind)
        if proxy is None or direct is None:
            return None, "not measured"
        return proxy - direct, f"+{proxy - direct:.2f} ms ({proxy:.2f} ms)"

    return value


def _egress_base(r: dict[str, Any]) -> Value:
    _, direct = egress_overhead(r, "direct")
    return direct, "not measured" if direct is None else f"direct connection {direct:.2f} ms"


def _tp(r: dict[str, Any]) -> Value:
    tp = r.get("throughput")
    if not tp:
        return None, "not measured"
    ratio = tp["hutch"]["median_mb_s"] / tp["raw_pipe"]["median_mb_s"]
    return ratio, f"{tp['hutch']['median_mb_s']:.0f} MB/s ({ratio:.0%} of the pipe)"


def _tp_base(r: dict[str, Any]) -> Value:
    tp = r.get("throughput")
    return (
        (None, "not measured")
        if not tp
        else (tp["raw_pipe"]["median_mb_s"], f"raw pipe {tp['raw_pipe']['median_mb_s']:.0f} MB/s")
    )


def _create(r: dict[str, Any]) -> Value:
    pool, cold = pool_create(r), cold_create(r)
    parts = [f"{ms(v)} {label}" for v, label in ((pool, "from the pool"), (cold, "cold")) if v is not None]
    return cold, ", ".join(parts) if parts else "not measured"


def _exec(r: dict[str, Any]) -> Value:
    """An exec among the round's other work (the judged value) and, when measured, 20 in a row."""
    one, steady = median(r, "sdk_exec"), median(r, "sdk_exec_steady")
    parts = [f"{ms(v)} {label}" for v, label in ((one, "interleaved"), (steady, "20 in a row")) if v is not None]
    return one, ", ".join(parts) if parts else "not measured"


def _run(r: dict[str, Any]) -> Value:
    """The one-shot run: cold (the latency section, pool off) and, when measured, from the pool
    (a member ready for each) and back to back with the default pool (the judged value stays cold)."""
    cold, pooled, default = median(r, "cli_run"), pool_median(r, "cli_run"), pool_median(r, "cli_run_default")
    found = ((cold, "cold"), (pooled, "from the pool"), (default, "back to back with the default pool"))
    parts = [f"{ms(v)} {label}" for v, label in found if v is not None]
    return cold, ", ".join(parts) if parts else "not measured"


BASELINES = (
    Row(
        "create -> first result (SDK)",
        _create,
        _labelled("bare_bwrap", "hardened bwrap `true`"),
        "<= 15 ms (<= 2.5x bwrap) from the pool; <= 40 ms cold",
        _create_met,
    ),
    Row(
        "exec round trip (SDK)",
        _exec,
        _labelled("bare_true", "fork/exec `true`"),
        "<= 2 ms",
        _judge(lambda r: median(r, "sdk_exec") <= 2.0),  # type: ignore[operator]
    ),
    Row(
        "100 concurrent creates, all ready",
        _conc,
        _conc_base,
        "<= 0.5 s from a pool of 100, <= 2 s cold",
        _conc_met,
    ),
    Row(
        "host memory per idle sandbox (PSS, 100 idle)",
        _mem,
        _mem_base,
        "<= 2 MiB",
        _judge(lambda r: memory_pss(r) <= 2.0),  # type: ignore[operator]
    ),
    Row(
        "CLI `hutch exec SBX -- true`, whole process",
        _metric("cli_exec"),
        _labelled("bare_python", "`python -c pass`"),
        "<= 3x `python -c pass`",
        _judge(lambda r: _ratio(r, "cli_exec", "bare_python") <= 3.0),  # type: ignore[operator]
    ),
    Row(
        "one-shot `hutch run -- true`, whole process",
        _run,
        _labelled("bare_python", "`python -c pass`"),
        "<= 4x `python -c pass`",
        _judge(lambda r: _ratio(r, "cli_run", "bare_python") <= 4.0),  # type: ignore[operator]
    ),
    Row(
        "egress proxy overhead per request (absolute-form HTTP)",
        _egress("proxy_http"),
        _egress_base,
        "<= 0.25 ms over direct",
        _judge(lambda r: _egress("proxy_http")(r)[0] <= 0.25),  # type: ignore[operator]
    ),
    Row(
        "egress proxy overhead per request (CONNECT)",
        _egress("proxy_connect"),
        _egress_base,
        "<= 0.25 ms over direct",
        _judge(lambda r: _egress("proxy_connect")(r)[0] <= 0.25),  # type: ignore[operator]
    ),
    Row(
        "stdout throughput (100 MiB)",
        _tp,
        _tp_base,
        ">= 90% of a raw pipe",
        _judge(lambda r: _tp(r)[0] >= 0.9),  # type: ignore[operator]
    ),
)

# (what, hutch metric, peer metric, peer label, goal ratio hutch/peer or None)
PEERS = (
    ("one-shot `run -- true`", "cli_run", "podman_run", "`podman run --rm` (runc, busybox root, no network)", 0.5),
    ("one-shot `run -- true`", "cli_run", "runsc_do", "gVisor `runsc do /bin/true`", 0.5),
    ("one-shot `run -- true`", "cli_run", "srt_true", "sandbox-runtime `srt true`", 0.3),
    ("one-shot `run -- true`", "cli_run", "runc_run", "bare `runc run` (busybox bundle)", None),
    ("`exec SBX -- true`", "cli_exec", "podman_exec", "`podman exec CID /bin/true`", 0.5),
)


def _verdict(ok: bool | None) -> str:
    return "not judged" if ok is None else ("**met**" if ok else "**missed**")


def peer_reason(results: dict[str, Any], key: str) -> str:
    for p in results.get("peers") or []:
        if key in (p.get("keys") or []) and p.get("status") != "measured":
            return f"not measured: {p.get('reason', '?')}"
    return "not measured"


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Both tables as data (the JSON and the tests use these)."""
    out: list[dict[str, Any]] = []
    for row in BASELINES:
        value, shown = row.hutch(results)
        _, base_shown = row.baseline(results)
        out.append(
            {"table": "baselines", "metric": row.metric, "hutch": shown, "value": value, "baseline": base_shown,
             "goal": row.goal, "met": row.met(results)}
        )  # fmt: skip
    for what, mine, theirs, label, goal in PEERS:
        a, b = median(results, mine), median(results, theirs)
        ratio = None if a is None or not b else a / b
        out.append(
            {"table": "peers", "metric": what, "hutch": ms(a), "peer": f"{label} {ms(b) if b else peer_reason(results, theirs)}",
             "ratio": ratio, "goal": "-" if goal is None else f"<= {goal:g}",
             "met": None if ratio is None or goal is None else ratio <= goal}
        )  # fmt: skip
    return out


def render(results: dict[str, Any]) -> list[str]:
    data = rows(results)
    out = [
        "",
        "### The speed goals: hutch against bare baselines (same run, medians)",
        "",
        "| metric | hutch | bare baseline in the same run | goal | result |",
        "|---|---|---|---|---|",
    ]
    out += [
        f"| {r['metric']} | {r['hutch']} | {r['baseline']} | {r['goal']} | {_verdict(r['met'])} |"
        for r in data
        if r["table"] == "baselines"
    ]
    out += [
        "",
        "### The speed goals: hutch against what a user would pick instead (whole processes, same run, medians)",
        "",
        "| command | hutch | peer | ratio hutch/peer | goal | result |",
        "|---|---|---|---:|---|---|",
    ]
    for r in data:
        if r["table"] == "peers":
            ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
            out.append(f"| {r['metric']} | {r['hutch']} | {r['peer']} | {ratio} | {r['goal']} | {_verdict(r['met'])} |")
    return out
