"""The hutch benchmark harness: hutch's local provider against bare baselines and local peers.

    python bench/run.py                 # full run, a few minutes (installs the peers)
    python bench/run.py --quick         # under a minute, for CI (no peers)
    python bench/run.py --quick --guard # and exit 1 on a gross regression (bench/guard.py)
    python bench/run.py --iterations 50 --out bench/results/mine.json
    python bench/run.py --only egress   # one section (or a comma list): see SECTIONS

Runs in its own temp directory: a throwaway state directory (``HUTCH_HOME``) with its own
daemon, and the peers' installs. At the end, also on Ctrl-C, SIGTERM or an error, it stops
the peers, destroys every sandbox it made, stops that daemon (``hutch daemon stop``) and
removes the directory. Latency metrics are measured in interleaved rounds (one sample of
every metric, peers included, per round, the order rotated each round) after warm-up
rounds that are discarded, so slow drift and noise hit every metric alike. The egress
proxy is measured against a direct connection by bench/egress.py. Standard library and
hutch only (the peers bring their own). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import baselines  # noqa: E402 - sibling modules, found through the path set above
import cpu  # noqa: E402
import egress  # noqa: E402
import guard  # noqa: E402
import peers  # noqa: E402
import peers_oci  # noqa: E402
import pool  # noqa: E402
import report  # noqa: E402

TMP = Path(tempfile.mkdtemp(prefix="hutch-bench-"))
os.chmod(TMP, 0o711)  # as root, sandbox uids must pass through to the state dir
HOME = TMP / "home"
PEERS_DIR = TMP / "peers"
os.environ["HUTCH_HOME"] = str(HOME)  # before hutch reads any setting
COLD_MOUNT = TMP / "cold-mount"  # an empty directory: a mount makes a create one the pool cannot serve
STEADY = 20  # execs in a row per round (sdk_exec_steady)
EGRESS_HOSTS = TMP / "egress-hosts"  # the proxy's resolver for the egress benchmark's upstream
EGRESS_HOSTS.write_text(egress.hosts_line())
os.environ["HUTCH_EGRESS_HOSTS"] = str(EGRESS_HOSTS)  # read by the daemon this harness starts
os.environ["HUTCH_POOL_SIZE"] = "0"  # cold creates everywhere but the pool section (bench/pool.py)
# With PYTHONDONTWRITEBYTECODE set (some shells and CI images set it), every timed `hutch`
# process would compile hutch from source (tens of ms): not what an installed hutch does.
NO_BYTECODE = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import hutch  # noqa: E402
from hutch._version import __version__  # noqa: E402
from hutch.client import Client  # noqa: E402
from hutch.config import Settings  # noqa: E402
from hutch.providers.local import bwrap as bw  # noqa: E402
from hutch.providers.local import cgroups, hold  # noqa: E402
from hutch.providers.local.host import launcher  # noqa: E402
from hutch.server.home import daemon_pid, prepare_home  # noqa: E402

PAYLOAD = "100M"  # head -c 100M: 100 MiB
PAYLOAD_BYTES = 100 << 20
NOT_BUILT = "measured by bench/workspaces.py (docs/benchmarks.md, Workspaces)"
UNBUILT = (  # not part of this harness: bench/workspaces.py measures them
    ("snapshot", "snapshot of a sandbox's workspace"),
    ("fork", "fork of a sandbox from a snapshot"),
)
SECTIONS = report.SECTIONS  # what --only chooses from


T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[bench {time.monotonic() - T0:5.0f}s] {msg}", file=sys.stderr, flush=True)


def hutch_cli() -> str:
    """The ``hutch`` script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "hutch"
    if beside.exists():
        return str(beside)
    found = shutil.which("hutch")
    if not found:
        raise SystemExit("cannot find the hutch command; run with the interpreter of the venv hutch is installed in")
    return found


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.settings = Settings.load()
        self.cli = hutch_cli()
        self.created: set[str] = set()
        self.root = os.geteuid() == 0
        self.bwrap = bw.find_bwrap(HOME)
        # As root, hutch starts bwrap as an unprivileged uid through its launcher (the idle
        # helper's --launch, else setpriv: no fork of a Python process); the baseline makes
        # the same identity change the same way.
        uid = self.settings.uid_base
        helper = hold.idle_helper(self.settings)
        self.drop_prefix = (launcher(uid, [], {}, helper) or []) if self.root else []
        self.bwrap_argv = [*self.drop_prefix, self.bwrap.path, *bw.HARDENING, "--ro-bind", "/usr", "/usr", *bw.root_links()]
        self.bwrap_argv += ["--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
        self.live: hutch.Sandbox | None = None
        self.pool_misses = 0  # pool samples taken after 30 s without a ready member
        self.egress: egress.EgressBench | None = None
        self.peers: list[peers.Peer] = []  # installed and measured
        self.started: list[peers.Peer] = []  # every peer whose install began: all are closed at the end
        self.peer_status: list[dict[str, Any]] = []
        self.pending: list[hutch.Sandbox] = []  # made in a timed region, destroyed in the background
        self.pending_lock = threading.Lock()
        self.stop = threading.Event()
        self.destroyer = threading.Thread(target=self._destroy_pending, name="destroyer", daemon=True)
        self.destroyer.start()

    # -- helpers ---------------------------------------------------------------------

    def _drop(self) -> None:
        """preexec for the bare bwrap baseline when setpriv is missing (as hutch then does)."""
        uid = self.settings.uid_base
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    def _create(self, **spec: Any) -> hutch.Sandbox:
        sbx = hutch.Sandbox.create(**spec)
        self.created.add(sbx.id)
        return sbx

    def _destroy(self, sbx: hutch.Sandbox) -> None:
        sbx.destroy()

    def _destroy_many(self, sandboxes: list[hutch.Sandbox]) -> None:
        """Destroy concurrently, outside any timed region."""
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(self._destroy, sandboxes))

    def _destroy_pending(self) -> None:
        """Background thread: destroy what the create metric made, outside any timed region."""
        while not self.stop.is_set():
            with self.pending_lock:
                sbx = self.pending.pop(0) if self.pending else None
            if sbx is None:
                self.stop.wait(0.05)
                continue
            try:
                self._destroy(sbx)
            except hutch.HutchError as exc:
                log(f"background destroy of {sbx.id} failed: {exc} (cleanup retries)")

    def drain(self, timeout: float = 120.0) -> None:
        """Wait until the background destroyer has nothing left."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.pending_lock:
                if not self.pending:
                    break
            time.sleep(0.05)

    @staticmethod
    def _check(result: subprocess.CompletedProcess[bytes], what: str) -> None:
        if result.returncode != 0:
            err = result.stderr.decode(errors="replace").strip() if result.stderr else ""
            raise RuntimeError(f"{what} exited with {result.returncode}: {err}")

    # -- one sample of each latency metric, in ms --------------------------------------

    def bare_true(self) -> dict[str, float]:
        t0 = time.perf_counter_ns()
        r = subprocess.run(["true"], check=False)
        t1 = time.perf_counter_ns()
        self._check(r, "true")
        return {"bare_true": (t1 - t0) / 1e6}

    def bare_python(self) -> dict[str, float]:
        """``python -c pass`` with the interpreter the ``hutch`` script runs on: the floor of any Python CLI."""
        t0 = time.perf_counter_ns()
        r = subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=False)
        t1 = time.perf_counter_ns()
        self._check(r, "python -c pass")
        return {"bare_python": (t1 - t0) / 1e6}

    def bare_bwrap(self) -> dict[str, float]:
        pre = self._drop if self.root and not self.drop_prefix else None
        t0 = time.perf_counter_ns()
        r = subprocess.run(self.bwrap_argv, stderr=subprocess.PIPE, check=False, preexec_fn=pre)
        t1 = time.perf_counter_ns()
        self._check(r, "bare bwrap")
        return {"bare_bwrap": (t1 - t0) / 1e6}

    def sdk_create_first(self) -> dict[str, float]:
        t0 = time.perf_counter_ns()
        sbx = hutch.Sandbox.create()
        r = sbx.exec(["true"])
        t1 = time.perf_counter_ns()
        self.created.add(sbx.id)
        with self.pending_lock:
            self.pending.append(sbx)
        if r.exit_code != 0:
            raise RuntimeError(f"exec in a new sandbox failed: {r}")
        return {"sdk_create_first": (t1 - t0) / 1e6}

    def pool_ready(self) -> bool:
        """Whether the daemon keeps a pool of the default shape (host /usr) with a member ready."""
        try:
            with Client(self.settings) as client:
                status = client.pool_status()
        except (hutch.HutchError, AttributeError):  # a hutch without a pool
            return False
        return any(p.get("image") is None and p.get("ready", 0) > 0 for p in status.get("pools", []))

    def has_pool(self) -> bool:
        try:
            with Client(self.settings) as client:
                status = client.pool_status()
        except (hutch.HutchError, AttributeError):
            return False
        return any(p.get("image") is None and p.get("target", 0) > 0 for p in status.get("pools", []))

    def sdk_create_first_pool(self) -> dict[str, float]:
        """Create + first exec once the pool has a member ready (the wait is not timed)."""
        end = time.monotonic() + 30
        while not self.pool_ready() and time.monotonic() < end:
            time.sleep(0.02)
        if not self.pool_ready():
            self.pool_misses += 1
        ms = self.sdk_create_first()["sdk_create_first"]
        return {"sdk_create_first_pool": ms}

    def sdk_create_first_cold(self) -> dict[str, float]:
        """Create + first exec of a sandbox the pool cannot serve: one read-only mount more (a different start)."""
        t0 = time.perf_counter_ns()
        sbx = hutch.Sandbox.create(mounts=[f"{COLD_MOUNT}:/mnt/hutch-bench:ro"])
        r = sbx.exec(["true"])
        t1 = time.perf_counter_ns()
        self.created.add(sbx.id)
        with self.pending_lock:
            self.pending.append(sbx)
        if r.exit_code != 0:
            raise RuntimeError(f"exec in a new (cold) sandbox failed: {r}")
        return {"sdk_create_first_cold": (t1 - t0) / 1e6}

    def sdk_exec(self) -> dict[str, float]:
        """One exec in the live sandbox (the client opens a connection per request)."""
        assert self.live is not None
        t0 = time.perf_counter_ns()
        r = self.live.exec(["true"])
        t1 = time.perf_counter_ns()
        if r.exit_code != 0:
            raise RuntimeError(f"exec failed: {r}")
        return {"sdk_exec": (t1 - t0) / 1e6}

    def sdk_exec_steady(self) -> dict[str, float]:
        """20 execs in a row in the live sandbox (an agent's loop of commands): their median. The
        interleaved ``sdk_exec`` comes after other work (cold caches, a refill, a destroy)."""
        assert self.live is not None
        took = []
        for _ in range(STEADY):
            t0 = time.perf_counter_ns()
            r = self.live.exec(["true"])
            took.append((time.perf_counter_ns() - t0) / 1e6)
            if r.exit_code != 0:
                raise RuntimeError(f"exec failed: {r}")
        return {"sdk_exec_steady": statistics.median(took)}

    def cli_exec(self) -> dict[str, float]:
        assert self.live is not None
        t0 = time.perf_counter_ns()
        r = subprocess.run([self.cli, "exec", self.live.id, "--", "true"], capture_output=True, check=False)
        t1 = time.perf_counter_ns()
        self._check(r, "hutch exec")
        return {"cli_exec": (t1 - t0) / 1e6}

    def cli_run(self) -> dict[str, float]:
        t0 = time.perf_counter_ns()
        r = subprocess.run([self.cli, "run", "--", "true"], capture_output=True, check=False)
        t1 = time.perf_counter_ns()
        self._check(r, "hutch run")
        return {"cli_run": (t1 - t0) / 1e6}

    # -- phases ----------------------------------------------------------------------

    def start_daemon(self) -> float:
        t0 = time.perf_counter_ns()
        r = subprocess.run([self.cli, "daemon", "start"], capture_output=True, check=False)
        t1 = time.perf_counter_ns()
        self._check(r, "hutch daemon start")
        return (t1 - t0) / 1e6

    def install_peers(self) -> None:
        """Install every peer into the temp dir; a failure is recorded as "not measured: reason"."""
        PEERS_DIR.mkdir()
        every: list[peers.Peer] = [
            peers.SandboxRuntime(PEERS_DIR, self.bwrap.path),
            peers.SweRex(PEERS_DIR),
            peers_oci.Podman(PEERS_DIR),
            peers_oci.Runsc(PEERS_DIR),
            peers_oci.Runc(PEERS_DIR),
        ]
        for peer in every:
            log(f"peer {peer.name}: installing")
            self.started.append(peer)
            t0 = time.monotonic()
            try:
                peer.install()
            except (peers.NotMeasuredError, RuntimeError, OSError, ValueError, KeyError) as exc:
                peer.close()
                log(f"peer {peer.name}: not measured: {exc}")
                self.peer_status.append(peer.info | {"status": "not measured", "reason": str(exc), "keys": list(peer.keys)})
                continue
            self.peers.append(peer)
            peer.info |= {"status": "measured", "keys": list(peer.keys), "install_s": round(time.monotonic() - t0, 1)}
            self.peer_status.append(peer.info)
            log(f"peer {peer.name} {peer.info.get('version', '')}: installed in {peer.info['install_s']:.0f} s")

    def _peer_funcs(self) -> list[Callable[[], dict[str, float]]]:
        """One function per peer metric, each returning {key: ms}; a peer failing mid-run is dropped."""
        funcs: list[Callable[[], dict[str, float]]] = []
        for peer in self.peers:
            for key, sample in peer.samplers().items():

                def one(key: str = key, sample: Callable[[], float] = sample, peer: peers.Peer = peer) -> dict[str, float]:
                    if peer.info.get("status") != "measured":
                        return {}
                    try:
                        return {key: sample()}
                    except (peers.NotMeasuredError, RuntimeError, OSError) as exc:
                        reason = f"failed during the run: {peers.sanitize(str(exc))}"
                        log(f"peer {peer.name}: {reason}")
                        peer.info |= {"status": "not measured", "reason": reason}
                        return {}

                funcs.append(one)
        return funcs

    def latency(self, rounds: int, warmup: int) -> dict[str, Any]:
        self.live = self._create()
        pooled: list[Callable[[], dict[str, float]]] = []
        if self.has_pool():
            COLD_MOUNT.mkdir(mode=0o755, exist_ok=True)
            pooled = [self.sdk_create_first_pool, self.sdk_create_first_cold]
            log("latency: the daemon keeps a pool: create -> first is also measured from the pool and cold")
        funcs: list[Callable[[], dict[str, float]]] = [
            self.bare_true,
            self.bare_python,
            self.bare_bwrap,
            self.sdk_create_first,
            *pooled,
            self.sdk_exec,
            self.sdk_exec_steady,
            self.cli_exec,
            self.cli_run,
            *self._peer_funcs(),
        ]
        samples: dict[str, list[float]] = {n: [] for n in report.LATENCY}
        warm: dict[str, list[float]] = {n: [] for n in report.LATENCY}
        every = max(1, rounds // 5)
        for i in range(warmup + rounds):
            shift = i % len(funcs)
            for func in funcs[shift:] + funcs[:shift]:
                for name, ms in func().items():
                    (warm if i < warmup else samples)[name].append(ms)
            done = i - warmup + 1
            if done == 0 or (done > 0 and done % every == 0):
                log(f"latency: round {done}/{rounds}" + (" (warm-up done)" if done == 0 else ""))
        self._destroy(self.live)
        self.live = None
        self.drain()
        failed = {k for p in self.peers if p.info.get("status") != "measured" for k in p.keys}
        return {
            n: {
                "label": report.LATENCY[n][0],
                "kind": report.LATENCY[n][1],
                "unit": "ms",
                **report.summarize(samples[n]),
                "samples_ms": [round(x, 4) for x in samples[n]],
                "warmup_samples_ms": [round(x, 4) for x in warm[n]],
            }
            for n in report.LATENCY
            if samples[n] and n not in failed
        }

    def _batch(self, count: int, start: Callable[[], Any]) -> tuple[float, list[Any]]:
        """``count`` threads call ``start`` at once; ms until the last one returned, and the results."""
        gate = threading.Barrier(count + 1)
        out: list[Any] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker() -> None:
            gate.wait()
            try:
                value = start()
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                with lock:
                    errors.append(exc)
                return
            with lock:
                out.append(value)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(count)]
        for t in threads:
            t.start()
        gate.wait()
        t0 = time.perf_counter_ns()
        for t in threads:
            t.join()
        t1 = time.perf_counter_ns()
        if errors:
            raise RuntimeError(f"{len(errors)} of {count} concurrent starts failed, first: {errors[0]!r}") from errors[0]
        return (t1 - t0) / 1e6, out

    def pool_rows(self, rounds: int, warmup: int, count: int, conc_rounds: int) -> dict[str, Any]:
        """The warm pool's rows (bench/pool.py), against bare bwrap measured in the same rounds."""
        ops = pool.Ops(
            log,
            lambda: self.bare_bwrap()["bare_bwrap"],
            self._create,
            self._destroy_many,
            self._batch,
            self.created,
            lambda: self.cli_run()["cli_run"],
        )
        return pool.measure(ops, rounds, warmup, count, conc_rounds)

    def concurrent(self, count: int, rounds: int) -> dict[str, Any]:
        """``count`` concurrent creates, time to all created, alternating with ``count`` concurrent bare bwraps."""
        times: dict[str, list[float]] = {"hutch": [], "bare_bwrap": []}
        pre = self._drop if self.root and not self.drop_prefix else None

        def bare() -> None:
            r = subprocess.run(self.bwrap_argv, stderr=subprocess.PIPE, check=False, preexec_fn=pre)
            self._check(r, "bare bwrap")

        for i in range(rounds):
            for side in ("bare_bwrap", "hutch") if i % 2 == 0 else ("hutch", "bare_bwrap"):
                if side == "hutch":
                    ms, made = self._batch(count, self._create)
                    self._destroy_many(made)
                else:
                    ms, _ = self._batch(count, bare)
                times[side].append(ms)
                log(f"concurrency: {count} {'creates' if side == 'hutch' else 'bare bwraps'} in {ms:.0f} ms")
        return {
            "count": count,
            "hutch": {"label": f"{count} concurrent `Sandbox.create()` (time to all created)", "samples_ms": times["hutch"]},
            "bare_bwrap": {"label": f"{count} concurrent bare hardened bwraps of `true`", "samples_ms": times["bare_bwrap"]},
        }

    def memory(self, count: int) -> dict[str, Any]:
        before = settle_used()
        sandboxes: list[hutch.Sandbox] = []
        try:
            with ThreadPoolExecutor(4) as pool:  # not timed: 4 at a time to keep 500 short
                futures = [pool.submit(self._create) for _ in range(count)]
                for f in futures:
                    sandboxes.append(f.result())
            for sbx in sandboxes:  # every agent is up and answering
                sbx.exec(["true"])
            after = settle_used()
            ids = {s.id for s in sandboxes}
            pss, procs = sandbox_pss(ids)
        finally:
            self._destroy_many(sandboxes)
        released = settle_used()
        per = (after - before) / count / 1024
        return {
            "count": count,
            "meminfo_used_before_kib": before,
            "meminfo_used_after_kib": after,
            "meminfo_used_after_destroy_kib": released,
            "meminfo_per_sandbox_mib": round(per, 3),
            "pss_total_kib": pss,
            "pss_per_sandbox_mib": None if pss is None else round(pss / count / 1024, 3),
            "processes_per_sandbox": None if procs is None else procs / count,
        }

    def throughput(self, rounds: int, warmup: int) -> dict[str, Any]:
        sbx = self._create()
        argv = ["head", "-c", PAYLOAD, "/dev/zero"]
        cap = self.settings.output_cap
        times: dict[str, list[float]] = {"raw_pipe": [], "hutch": []}
        try:
            check = sbx.client.exec(sbx.id, {"command": argv, "env": {}, "max_output": cap})
            if check["stdout_bytes"] != PAYLOAD_BYTES or check["exit_code"] != 0:
                raise RuntimeError(f"hutch did not drain the stream: {check['stdout_bytes']} bytes, exit {check['exit_code']}")
            for i in range(warmup + rounds):
                for name in ("raw_pipe", "hutch") if i % 2 == 0 else ("hutch", "raw_pipe"):
                    t0 = time.perf_counter_ns()
                    if name == "raw_pipe":
                        raw = subprocess.run(argv, stdout=subprocess.PIPE, check=False)
                        t1 = time.perf_counter_ns()
                        if len(raw.stdout) != PAYLOAD_BYTES:
                            raise RuntimeError(f"raw pipe read {len(raw.stdout)} bytes")
                    else:
                        res = sbx.exec(argv)
                        t1 = time.perf_counter_ns()
                        if res.exit_code != 0 or not res.truncated:
                            raise RuntimeError(f"hutch exec of {PAYLOAD} bytes: {res}")
                    if i >= warmup:
                        times[name].append((t1 - t0) / 1e6)
        finally:
            self._destroy(sbx)
        out: dict[str, Any] = {"bytes": PAYLOAD_BYTES, "max_output": cap, "command": argv, "hutch_drained_bytes": PAYLOAD_BYTES}
        for name, ms in times.items():
            rates = [PAYLOAD_BYTES / 1e6 / (t / 1000) for t in ms]
            out[name] = {
                "samples_ms": [round(t, 3) for t in ms],
                "samples_mb_s": [round(r, 1) for r in rates],
                "median_mb_s": statistics.median(rates),
            }
        out["ratio"] = out["hutch"]["median_mb_s"] / out["raw_pipe"]["median_mb_s"]
        return out

    def egress_proxy(self, quick: bool, transfer: bool) -> dict[str, Any]:
        """Per-request latency through the egress proxy vs direct, and a 100 MiB transfer both ways."""
        rounds, warmup, per_batch, warm_requests = (6, 1, 20, 2) if quick else (20, 2, 50, 3)
        self.egress = egress.EgressBench(TMP, self._create, log, report.summarize)
        try:
            self.egress.start()
            log(f"egress: {rounds} rounds + {warmup} warm-up of {per_batch} requests per side (first {warm_requests} kept apart)")
            out: dict[str, Any] = {
                "upstream": f"127.0.0.1:{self.egress.port} as {egress.NAME} (proxy hosts file)",
                "policy": {"allow_hosts": [egress.NAME], "allow_ports": [self.egress.port], "allow_cidrs": ["127.0.0.1/32"]},
                "client": f"{egress.PYTHON} -I -S, a new connection per request, timed in process",
                "rounds": rounds,
                "warmup_rounds": warmup,
                "requests_per_batch": per_batch,
                "warmup_requests_per_batch": warm_requests,
                "latency": self.egress.latency(rounds, warmup, per_batch, warm_requests),
            }
            if transfer:
                tp_rounds = 3 if quick else 10
                log(f"egress transfer: {tp_rounds} rounds + 1 warm-up of {egress.TRANSFER_BYTES >> 20} MiB, proxy and direct")
                out["transfer"] = self.egress.transfer(tp_rounds, 1)
            out |= self.egress.counters()
            return out
        finally:
            self.egress.close()
            if self.egress.sbx is not None:
                self._destroy(self.egress.sbx)

    def cpu(self, quick: bool) -> dict[str, Any]:
        """CPU time of the hot paths and their baselines (bench/cpu.py), for the guard's tight checks."""
        rounds, warmup, blocks, execs, creates = (8, 1, 4, 60, 8) if quick else (30, 3, 5, 200, 20)
        self.drain()
        daemon = daemon_pid(self.settings)
        if daemon is None:
            raise RuntimeError("cannot find the benchmark daemon's pid")
        live = self._create()
        live.exec(["true"])
        pre = self._drop if self.root and not self.drop_prefix else None
        quiet: dict[str, Any] = {}
        argvs: dict[str, tuple[list[str], dict[str, Any]]] = {
            "cpu_true": (["true"], quiet),
            "cpu_python": ([sys.executable, "-c", "pass"], quiet),
            "cpu_bwrap": (self.bwrap_argv, {"preexec_fn": pre}),
            "cpu_cli_exec": ([self.cli, "exec", live.id, "--", "true"], quiet),
            "cpu_cli_run": ([self.cli, "run", "--", "true"], quiet),
        }

        def sdk_exec() -> None:
            for _ in range(execs):
                if live.exec(["true"]).exit_code != 0:
                    raise RuntimeError("exec of true failed")

        def fork_true() -> None:
            for _ in range(execs):
                self._check(subprocess.run(["true"], check=False), "true")

        made: list[hutch.Sandbox] = []

        def sdk_create() -> None:
            for _ in range(creates):
                sbx = self._create()
                made.append(sbx)
                if sbx.exec(["true"]).exit_code != 0:
                    raise RuntimeError("exec of true in a new sandbox failed")

        def destroy_made() -> None:
            self._destroy_many(made)
            made.clear()

        def bare_bwrap() -> None:
            for _ in range(creates):
                r = subprocess.run(self.bwrap_argv, stderr=subprocess.PIPE, check=False, preexec_fn=pre)
                self._check(r, "bare bwrap")

        def proc_walk() -> None:
            for _ in range(creates):
                cpu.proc_walk(self.settings.uid_base)

        try:
            log(f"cpu: {rounds} rounds + {warmup} warm-up of whole processes")
            samples = cpu.processes(argvs, rounds, warmup)
            log(f"cpu: {blocks} blocks of {execs} execs and {creates} creates, alternating with their baselines")
            samples |= cpu.loops(
                daemon,
                {
                    "cpu_fork_true": (fork_true, execs, False, None),
                    "cpu_sdk_exec": (sdk_exec, execs, True, None),
                    "cpu_bwrap_loop": (bare_bwrap, creates, False, None),
                    "cpu_sdk_create": (sdk_create, creates, True, destroy_made),
                    "cpu_proc_walk": (proc_walk, creates, False, None),
                },
                blocks,
            )
        finally:
            self._destroy_many([live, *made])
        return {
            "daemon_tree": "the daemon and its live descendants, utime + stime + cutime + cstime from /proc/PID/stat",
            "calls_per_block": {"exec": execs, "create": creates},
            "processes_on_machine": sum(1 for n in os.listdir("/proc") if n.isdigit()),
            "metrics": {
                key: {"label": cpu.LABELS[key][0], "kind": cpu.LABELS[key][1], "unit": "ms CPU", **cpu.summary(v)}
                for key, v in samples.items()
            },
        }

    # -- cleanup ---------------------------------------------------------------------

    def cleanup(self) -> list[str]:
        """Stop the peers, destroy every sandbox in our state dir, stop our daemon; returns problems found."""
        problems: list[str] = []
        if self.egress is not None:
            self.egress.close()  # the upstream server; its sandbox goes with the others below
        for peer in self.started:
            try:
                peer.close()
            except OSError as exc:
                problems.append(f"stopping peer {peer.name}: {exc}")
        self.stop.set()
        self.destroyer.join(timeout=30)
        live: list[dict[str, Any]] = []
        with Client(self.settings, autostart=bool(self.created)) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    live = client.list()
                except hutch.HutchError:
                    break  # no daemon and nothing of ours to adopt
                if not any(s["state"] == "creating" for s in live) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)

        def destroy(sid: str) -> None:
            with Client(self.settings) as c:
                try:
                    c.destroy(sid)
                except hutch.HutchError as exc:
                    problems.append(f"destroy {sid}: {exc}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(destroy, sorted(self.created | {s["id"] for s in live})))
        stop = subprocess.run([self.cli, "daemon", "stop"], capture_output=True, check=False, timeout=60)
        if stop.returncode != 0:
            problems.append(f"hutch daemon stop exited {stop.returncode}: {stop.stderr.decode(errors='replace')}")
        leftovers = sandbox_processes(self.created)
        if leftovers:
            problems.append(f"processes left in benchmark sandboxes: {sorted(leftovers)}")
        return problems


# -- host measurements ---------------------------------------------------------------


def meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])
    return out


def used_kib() -> int:
    m = meminfo()
    return m["MemTotal"] - m["MemAvailable"]


def settle_used(samples: int = 5, pause: float = 0.1) -> int:
    """Median of a few readings of MemTotal - MemAvailable (KiB) after a short settle."""
    time.sleep(0.5)
    readings = []
    for _ in range(samples):
        readings.append(used_kib())
        time.sleep(pause)
    return int(statistics.median(readings))


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def sandbox_processes(ids: set[str]) -> dict[int, str]:
    """Host pids whose cgroup path names one of ``ids`` (pid -> sandbox id)."""
    found: dict[int, str] = {}
    if not ids:
        return found
    for pid in _pids():
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        for sid in ids:
            if sid in text:
                found[pid] = sid
                break
    return found


def sandbox_pss(ids: set[str]) -> tuple[int | None, int | None]:
    """Summed PSS (KiB) and count of the processes in these sandboxes' cgroups."""
    procs = sandbox_processes(ids)
    if not procs:
        return None, None
    total = 0
    for pid in procs:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total, len(procs)


def machine_info(b: Bench) -> dict[str, Any]:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    layout = cgroups.detect()
    src = Path(hutch.__file__).resolve().parent  # the hutch actually measured (PYTHONPATH may point elsewhere)
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True, text=True)
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "loadavg_at_start": os.getloadavg(),
        "mem_total_mib": meminfo()["MemTotal"] // 1024,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pythondontwritebytecode_dropped": NO_BYTECODE is not None,
        "hutch": __version__,
        "hutch_path": str(src),
        "git_commit": commit.stdout.strip() or None,
        "src_dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None,
        "bwrap": {"path": b.bwrap.path, "version": ".".join(map(str, b.bwrap.version)), "source": b.bwrap.source},
        "bwrap_baseline_argv": b.bwrap_argv,
        "node": _version_of(["node", "--version"]),
        "root": b.root,
        "sandbox_host_uid_baseline": b.settings.uid_base if b.root else os.getuid(),
        "cgroup_mode": layout.mode,
        "cgroup_controllers": layout.controllers,
    }


def _version_of(argv: list[str]) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def print_summary(results: dict[str, Any]) -> None:
    print()
    print(report.render(results))
    rows = report.evaluate_targets(results)
    for row in rows:
        mark = "n/a   " if row["met"] is None else ("MET   " if row["met"] else "MISSED")
        print(f"{mark} {row['target']}: {row['measured']} (goal {row['goal']})")
    for line in guard.describe(results.get("guard") or guard.evaluate(results)):
        print(line)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Benchmark hutch's local provider against bare baselines and local peers.")
    ap.add_argument("--quick", action="store_true", help="fewer rounds, memory at 10 and 100 only, no peers (under a minute)")
    ap.add_argument("--iterations", type=int, help="interleaved latency rounds (default 80, quick 10)")
    ap.add_argument("--warmup", type=int, help="discarded warm-up rounds (default 5, quick 2)")
    ap.add_argument("--concurrency", type=int, help="sandboxes created at once (default 100, 25 with --guard)")
    ap.add_argument("--out", type=Path, help="results JSON (default bench/results/MODE-TIMESTAMP.json)")
    ap.add_argument("--skip-memory", action="store_true", help="skip the idle-sandbox memory measurement")
    ap.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="install and measure the peers (default: yes, no with --quick)",
    )
    ap.add_argument("--guard", action="store_true", help="exit 1 on a gross regression against this run's baselines")
    ap.add_argument(
        "--only",
        action="append",
        metavar="SECTION[,SECTION]",
        help=f"measure only these sections: {', '.join(SECTIONS)} (default: all)",
    )
    args = ap.parse_args(argv)
    chosen = [s.strip() for item in args.only or [] for s in item.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        ap.error(f"--only: unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    args.sections = [s for s in SECTIONS if s in chosen] if chosen else list(SECTIONS)
    if (args.skip_memory or (args.guard and not args.only)) and "memory" in args.sections:
        args.sections.remove("memory")  # the guard judges no memory: --guard alone skips it
    args.concurrency = args.concurrency or (25 if args.guard else 100)
    args.iterations = args.iterations or (10 if args.quick else 80)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    args.peers = (not args.quick and "latency" in args.sections) if args.peers is None else args.peers
    if args.iterations < 1 or args.warmup < 0 or args.concurrency < 1:
        ap.error("--iterations and --concurrency must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    mode = "quick" if args.quick else "full"
    stamp = dt.datetime.now(dt.UTC)
    part = "" if args.only is None else "-" + "-".join(args.sections)
    out = args.out or HERE / "results" / f"{mode}{part}-{stamp:%Y%m%d-%H%M%S}.json"

    def terminate(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    bench: Bench | None = None
    t_start = time.monotonic()
    code = 0
    try:
        prepare_home(HOME)
        bench = Bench(args)
        log(f"temp dir {TMP}; bwrap {bench.bwrap.path}; {mode} mode, {args.iterations} rounds + {args.warmup} warm-up")
        if NO_BYTECODE is not None:
            log("PYTHONDONTWRITEBYTECODE dropped: the timed hutch processes use (and write) bytecode caches")
        results: dict[str, Any] = {
            "schema": 2,
            "timestamp": stamp.isoformat(timespec="seconds"),
            "command": [Path(sys.executable).name, *sys.argv] if argv is None else ["bench/run.py", *argv],
            "mode": mode,
            "iterations": args.iterations,
            "warmup": args.warmup,
            "sections": args.sections,
            "machine": machine_info(bench),
        }
        results["daemon_cold_start_ms"] = round(bench.start_daemon(), 3)
        log(f"daemon up in {results['daemon_cold_start_ms']:.0f} ms")
        sections = args.sections
        if "latency" in sections:
            if args.peers:
                bench.install_peers()
            results["metrics"] = bench.latency(args.iterations, args.warmup)
            results["pool_samples_without_a_ready_member"] = bench.pool_misses
            results["peers"] = bench.peer_status
            for peer in bench.peers:
                peer.close()
        if "concurrency" in sections:
            conc_rounds = 2 if args.quick else 6
            log(f"concurrency: {args.concurrency} at once, {conc_rounds} rounds alternating with bare bwrap")
            results["concurrent"] = bench.concurrent(args.concurrency, conc_rounds)
        if "pool" in sections:
            pool_conc, pool_count = (1, min(args.concurrency, 20)) if args.quick else (3, args.concurrency)
            log(f"pool: {args.iterations} rounds from the warm pool, then {pool_count} at once from a pool of as many")
            results["pool"] = bench.pool_rows(args.iterations, args.warmup, pool_count, pool_conc)
        if "memory" in sections:
            counts = [10, 100] if args.quick else [10, 100, 500]
            results["memory"] = []
            for count in counts:
                log(f"memory: {count} idle sandboxes")
                results["memory"].append(bench.memory(count))
            log("memory: 10 idle bare bwraps (the baseline)")
            pre = bench._drop if bench.root and not bench.drop_prefix else None
            results["memory_bwrap"] = baselines.idle_bwrap_pss(bench.bwrap_argv, 10, pre)
        if "cpu" in sections:
            results["cpu"] = bench.cpu(args.quick)
        if "throughput" in sections:
            tp_rounds = 3 if args.quick else 10
            log(f"throughput: {tp_rounds} rounds of {PAYLOAD} through hutch and a raw pipe")
            results["throughput"] = bench.throughput(tp_rounds, 1)
        if "egress" in sections:
            results["egress"] = bench.egress_proxy(args.quick, transfer=not args.guard)
        results["not_measured"] = [{"what": f"{what}: {label}", "reason": NOT_BUILT} for what, label in UNBUILT]
        if "latency" in sections and not args.peers:
            results["not_measured"].append({"what": "peers", "reason": "skipped (--no-peers or --quick)"})
        if "egress" in sections and args.guard:
            results["not_measured"].append(
                {"what": "egress transfer: 100 MiB through the proxy vs direct", "reason": "skipped with --guard (kept fast)"}
            )
        skipped = [s for s in SECTIONS if s not in sections]
        if skipped:
            why = "skipped (--only)" if args.only else "skipped (--skip-memory)" if args.skip_memory else "skipped (--guard)"
            results["not_measured"] += [{"what": f"section {s}", "reason": why} for s in skipped]
        results["targets"] = report.evaluate_targets(results)
        results["guard"] = guard.evaluate(results)
        results["elapsed_s"] = round(time.monotonic() - t_start, 1)
        results["machine"]["loadavg_at_end"] = os.getloadavg()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        print_summary(results)
        print(f"\nwrote {out} in {results['elapsed_s']:.0f} s; render it with: python bench/report.py {out}")
        if args.guard:
            failed = guard.failures(results["guard"])
            for line in failed:
                log(f"regression: {line}")
            code = 1 if failed else 0
        return code
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        signal.signal(signal.SIGINT, lambda *_: log("cleaning up, please wait"))
        signal.signal(signal.SIGTERM, lambda *_: log("cleaning up, please wait"))
        problems = []
        if bench is not None:
            problems = bench.cleanup()
        else:
            subprocess.run([hutch_cli(), "daemon", "stop"], capture_output=True, check=False, timeout=60)
        for problem in problems:
            log(f"cleanup: {problem}")
        if problems:
            log(f"kept the temp dir {TMP} for inspection")
        else:
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
