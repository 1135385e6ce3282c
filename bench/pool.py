"""The warm pool's rows: create -> first result from the pool, against the hardened bare
bwrap ``true`` measured in the same rounds, the one-shot ``hutch run -- true`` (whole process)
when the pool serves it (from a pool with a member ready for each, and back to back as a script
runs them with the default ``pool_size`` of 2, the refill racing the runs), and ``count`` concurrent
creates from a pool of ``count``. Used by bench/run.py (section ``pool``); the rest of the harness runs with the
pool off (``HUTCH_POOL_SIZE=0``), so its create rows stay cold.

The pool is filled before each timed part and not timed: a member starts in the background
at the lowest cpu priority, so this measures what a create costs when a member is ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hutch
from hutch.client import Client

FILL_TIMEOUT = 900.0  # seconds for a pool of 100 to fill on a loaded 2-core machine
DEFAULT_SIZE = 2  # the pool_size setting's default


@dataclass
class Ops:
    """What the pool rows use of bench/run.py's harness."""

    log: Callable[[str], None]
    bare_bwrap: Callable[[], float]  # ms of one hardened bare bwrap `true`
    create: Callable[[], hutch.Sandbox]
    destroy_many: Callable[[list[hutch.Sandbox]], None]
    batch: Callable[[int, Callable[[], Any]], tuple[float, list[Any]]]
    created: set[str]
    cli_run: Callable[[], float] | None = None  # ms of one whole `hutch run -- true` process


def fill(client: Client, size: int, log: Callable[[str], None]) -> float:
    """Set the host pool's size and wait until that many members are ready; seconds taken."""
    t0 = time.monotonic()
    client.pool_set(size)
    while True:
        (pool,) = [p for p in client.pool_status()["pools"] if p["image"] is None]
        if pool["ready"] >= pool["target"] and not pool["starting"]:
            if pool["target"] < size:
                raise RuntimeError(f"the pool is capped at {pool['target']} of {size}: {pool['capped']}")
            return time.monotonic() - t0
        if time.monotonic() - t0 > FILL_TIMEOUT:
            raise RuntimeError(f"the pool did not fill in {FILL_TIMEOUT:.0f} s: {pool}")
        time.sleep(0.1)


def measure(bench: Ops, rounds: int, warmup: int, count: int, conc_rounds: int) -> dict[str, Any]:
    from report import summarize

    client = Client()
    out: dict[str, Any] = {}
    try:
        took = fill(client, rounds + warmup, bench.log)
        bench.log(f"pool: {rounds + warmup} members ready in {took:.0f} s")
        samples: dict[str, list[float]] = {"create_first": [], "bare_bwrap": []}
        made: list[hutch.Sandbox] = []
        for i in range(warmup + rounds):
            order = ("create_first", "bare_bwrap") if i % 2 == 0 else ("bare_bwrap", "create_first")
            for side in order:
                if side == "bare_bwrap":
                    ms = bench.bare_bwrap()
                else:
                    t0 = time.perf_counter_ns()
                    sbx = hutch.Sandbox.create()
                    r = sbx.exec(["true"])
                    ms = (time.perf_counter_ns() - t0) / 1e6
                    made.append(sbx)
                    bench.created.add(sbx.id)
                    if r.exit_code != 0:
                        raise RuntimeError(f"exec in a pooled sandbox failed: {r}")
                    events = client.events(sbx.id)
                    if not any(e["type"] == "sandbox_created" and e["data"].get("pool") for e in events):
                        raise RuntimeError(f"sandbox {sbx.id} did not come from the pool")
                if i >= warmup:
                    samples[side].append(ms)
        bench.destroy_many(made)
        labels = {
            "create_first": "`Sandbox.create()` + `exec true` from the warm pool (SDK)",
            "bare_bwrap": "hardened bare bwrap `true`, the same rounds",
        }
        for key, values in samples.items():
            out[key] = {"label": labels[key], "unit": "ms", **summarize(values), "samples_ms": [round(x, 4) for x in values]}
        if bench.cli_run is not None:
            out["cli_run"] = _cli_runs(client, bench.cli_run, rounds, warmup, bench.log)
            out["cli_run_default"] = _cli_runs_back_to_back(client, bench.cli_run, rounds, warmup, bench.log)
        conc: list[float] = []
        for _ in range(conc_rounds):
            took = fill(client, count, bench.log)
            time.sleep(1.0)  # the last member's start settles
            ms, batch = bench.batch(count, bench.create)
            if any(s.id not in bench.created for s in batch):
                raise RuntimeError("a concurrent create was not recorded")
            conc.append(ms)
            bench.log(f"pool: {count} concurrent creates from a pool of {count} in {ms:.0f} ms (filled in {took:.0f} s)")
            client.pool_set(0)  # no refill while the batch is destroyed
            bench.destroy_many(batch)
        out["concurrent"] = {
            "count": count,
            "label": f"{count} concurrent `Sandbox.create()` from a pool of {count} (time to all created)",
            "samples_ms": [round(x, 3) for x in conc],
        }
    finally:
        client.pool_drain()
        client.close()
    return out


def _runs(client: Client, run: Callable[[], float], rounds: int, warmup: int) -> tuple[list[float], int, int]:
    """``warmup + rounds`` runs one after another: the timed ones' ms, and how many sandboxes
    were made meanwhile and how many of them came from the pool (their ``sandbox_created`` events)."""
    since = time.time()
    values = []
    for i in range(warmup + rounds):
        took = run()
        if i >= warmup:
            values.append(took)
    made = [e for e in client.events(types=["sandbox_created"], since=since, limit=1000) if e["type"] == "sandbox_created"]
    return values, sum(1 for e in made if e["data"].get("pool")), len(made)


def _cli_runs(client: Client, run: Callable[[], float], rounds: int, warmup: int, log: Callable[[str], None]) -> dict[str, Any]:
    """``hutch run -- true`` as whole processes while the pool has a member for each; every
    one's sandbox must have come from the pool (its ``sandbox_created`` event says so)."""
    from report import summarize

    fill(client, rounds + warmup, log)
    values, pooled, made = _runs(client, run, rounds, warmup)
    if pooled != warmup + rounds or made != warmup + rounds:
        raise RuntimeError(f"of {warmup + rounds} runs, {pooled} took a pooled sandbox ({made} made)")
    log(f"pool: {rounds} one-shot CLI runs, each from the pool")
    label = "CLI `hutch run -- true` from the warm pool (whole process)"
    return {"label": label, "unit": "ms", **summarize(values), "samples_ms": [round(x, 4) for x in values]}


def _cli_runs_back_to_back(
    client: Client, run: Callable[[], float], rounds: int, warmup: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """``hutch run -- true`` whole processes one after another, as a script runs them, with the
    pool at its default size: what a run costs when the refill has only the gaps between runs.
    Says how many of them the pool served (the rest were cold)."""
    from report import summarize

    fill(client, DEFAULT_SIZE, log)
    values, pooled, made = _runs(client, run, rounds, warmup)
    log(f"pool: {rounds + warmup} one-shot CLI runs back to back with a pool of {DEFAULT_SIZE}: {pooled} from the pool")
    label = f"CLI `hutch run -- true` back to back, the default pool of {DEFAULT_SIZE} (whole process)"
    return {
        "label": label,
        "unit": "ms",
        **summarize(values),
        "samples_ms": [round(x, 4) for x in values],
        "from_pool": pooled,
        "runs": made,
    }
