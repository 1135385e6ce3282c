"""CPU time of hutch's hot paths and of their baselines, measured in the same run.

Wall time on a shared 2-core machine swings with every other process; the CPU time a
piece of work burns barely does. This section times CPU, not wall, so the regression
guard (bench/guard.py) can hold tight limits without flaking:

- A whole process (``hutch exec SBX -- true``, ``hutch run -- true``, ``python -c pass``,
  ``true``, the hardened bare bwrap): user + system CPU from ``wait4``'s rusage, which
  covers the process and every descendant it waited for. Interleaved rounds, the order
  rotated each round.
- A loop through the daemon (SDK exec of ``true`` in a live sandbox; SDK create + first
  exec, the destroys done after the block, unmeasured): the harness thread's own CPU (``time.thread_time``) plus the CPU of the
  daemon's whole process tree, read from ``/proc/PID/stat`` (utime + stime + cutime +
  cstime of the daemon and of every live descendant: the sandboxes' processes included,
  and those reaped since, whose time moves to their parent's cutime). The counters tick
  at 10 ms, so each block runs long enough (hundreds of ms of CPU) for that to vanish;
  a block ends once the daemon's tree has been still for a moment (work the loop left
  behind, such as a pool's refill or a reaped sandbox, is counted). The baseline blocks
  (fork/exec of ``true``, the bare bwrap) alternate with them.

Standard library only.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def child_cpu_ms(argv: list[str], what: str, **kw: Any) -> float:
    """Run ``argv`` to its end; the user + system CPU (ms) of it and its waited-for descendants."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    assert proc.stderr is not None
    err = proc.stderr.read()  # bounded by what the command writes; ours write little
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}: {err.decode(errors='replace').strip()[-300:]}")
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu_ms(root: int) -> float:
    """CPU (ms) of ``root`` and every live descendant, counting the children each has reaped."""
    children: dict[int, list[int]] = {}
    fields: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            f = _stat_fields(int(name))
        except (OSError, IndexError):
            continue
        fields[int(name)] = f
        children.setdefault(int(f[1]), []).append(int(name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        f = fields.get(pid)
        if f is None:
            continue
        total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime, in clock ticks
        todo += children.get(pid, [])
    return total * TICK_MS


def settle(root: int, still: float = 0.3, timeout: float = 10.0) -> float:
    """The daemon tree's CPU once it stopped moving for ``still`` seconds (or at ``timeout``)."""
    end = time.monotonic() + timeout
    last = tree_cpu_ms(root)
    while time.monotonic() < end:
        time.sleep(still)
        now = tree_cpu_ms(root)
        if now - last <= TICK_MS:
            return now
        last = now
    return last


def proc_walk(low: int) -> None:
    """Walk ``/proc`` as a uid allocation must: the owner of every process, the start of those at ``low`` or above.

    A yardstick of this machine's size, not of hutch: a local create checks which host uids
    running processes hold, so its CPU grows with the number of processes on the machine
    (thousands when other daemons hold many sandboxes). The create check's baseline adds it.
    """
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid >= low:
                Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue


def own_block(body: Callable[[], None]) -> float:
    """CPU (ms) of ``body`` run in this thread, its waited-for children included."""
    c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.thread_time()
    body()
    t1, c1 = time.thread_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (t1 - t0 + (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)) * 1000.0


def daemon_block(daemon: int, body: Callable[[], None]) -> float:
    """CPU (ms) of ``body`` in this thread plus what the daemon's process tree burnt meanwhile."""
    d0 = settle(daemon)
    mine = own_block(body)
    return mine + settle(daemon) - d0


def summary(samples: list[float]) -> dict[str, Any]:
    return {
        "samples_ms": [round(x, 3) for x in samples],
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "iterations": len(samples),
    }


# key -> (label, kind, unit); "baseline" rows are the denominators of the guard's CPU ratios.
PROCESSES = {
    "cpu_true": ("`true` (whole process)", "baseline"),
    "cpu_python": ("`python -c pass` (whole process, the interpreter hutch runs on)", "baseline"),
    "cpu_bwrap": ("bare hardened `bwrap ... true` (whole process)", "baseline"),
    "cpu_cli_exec": ("CLI `hutch exec SBX -- true`, the client process", "hutch"),
    "cpu_cli_run": ("CLI `hutch run -- true`, the client process", "hutch"),
}
LOOPS = {
    "cpu_fork_true": ("fork/exec of `true` from the harness, per call", "baseline"),
    "cpu_bwrap_loop": ("bare hardened bwrap of `true` from the harness, per call", "baseline"),
    "cpu_proc_walk": ("a walk of `/proc` (every process's owner), per call: this machine's size", "baseline"),
    "cpu_sdk_exec": ("SDK `exec(['true'])`: client + daemon + sandbox, per exec", "hutch"),
    "cpu_sdk_create": ("SDK create + first `exec(['true'])`: client + daemon + sandbox, per sandbox", "hutch"),
}
LABELS = {**PROCESSES, **LOOPS}


def processes(argvs: dict[str, tuple[list[str], dict[str, Any]]], rounds: int, warmup: int) -> dict[str, list[float]]:
    """Interleaved rounds of whole-process CPU samples, the order rotated each round."""
    keys = list(argvs)
    out: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(warmup + rounds):
        shift = i % len(keys)
        for key in keys[shift:] + keys[:shift]:
            argv, kw = argvs[key]
            ms = child_cpu_ms(argv, key, **kw)
            if i >= warmup:
                out[key].append(ms)
    return out


Body = tuple[Callable[[], None], int, bool, Callable[[], None] | None]


def loops(daemon: int, bodies: dict[str, Body], rounds: int) -> dict[str, list[float]]:
    """Per-call CPU of each loop body, ``rounds`` blocks each, alternating.

    A body is ``(body, calls, through_daemon, after)``: ``after`` runs once the block is
    measured, untimed (the destroys of the sandboxes a create block made: a destroy polls
    until the sandbox's processes are gone, which costs more CPU the busier the machine).
    """
    keys = list(bodies)
    out: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(rounds):
        for key in keys if i % 2 == 0 else keys[::-1]:
            body, calls, through, after = bodies[key]
            ms = daemon_block(daemon, body) if through else own_block(body)
            out[key].append(ms / calls)
            if after is not None:
                after()
    return out


def render(results: dict[str, Any]) -> list[str]:
    """Markdown for the cpu section: CPU time per call of the hot paths and their baselines."""
    metrics = (results.get("cpu") or {}).get("metrics") or {}
    if not metrics:
        return []
    out = [
        "",
        "### CPU time (ms of user + system CPU per call, medians; what the guard's tight checks judge)",
        "",
        "| what | median | min | max | n |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in metrics.values():
        tag = " (baseline)" if row.get("kind") == "baseline" else ""
        s = row["samples_ms"]
        cells = " | ".join(f"{v:.2f}" if v < 10 else f"{v:.1f}" for v in (statistics.median(s), min(s), max(s)))
        out.append(f"| {row['label']}{tag} | {cells} | {len(s)} |")
    procs = results["cpu"].get("processes_on_machine")
    if procs:
        out += ["", f"Processes on the machine during the cpu section: {procs}."]
    return out
