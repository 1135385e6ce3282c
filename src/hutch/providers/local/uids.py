"""Host uids of sandboxes, allocated machine-wide (hutch running as root).

Every root daemon on the machine (each ``HUTCH_HOME``) takes its sandboxes' host uids
from one registry: a JSON file under a lock (``flock``) in a machine-wide directory,
``/var/lib/hutch/uids`` by default (setting ``uid_registry``). An entry is a range
``(start, count)`` held by one sandbox of one state directory and the daemon that made it
(pid and start time); a plain sandbox holds one uid, and the format is ready for an image
sandbox's range (its root and its users).

An entry is held while its sandbox's directory exists (the sandbox runs, is paused, or
is lost but not destroyed: its files are still owned by those uids) or while the daemon
that wrote it is alive (a create in progress). Entries that are neither are reclaimed at
the next allocation, so a daemon killed with its state directory removed leaks nothing.
A new range never overlaps a held one, nor a uid some process on the machine runs as (a
daemon of an older hutch, or one pointed at another registry).

A daemon's changes go through one batch at a time: the calls of concurrent creates and
destroys queue while one batch holds the lock, and the next batch serves all of them with
one read, one pruning of the unheld entries, at most one walk of ``/proc`` and one write
(with 4000 processes on the machine a walk cost ~100 ms of CPU, which concurrent creates
used to pay one after another under the lock).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar, cast

from hutch.config import Settings
from hutch.errors import CapacityError, HutchError, UnavailableError
from hutch.models import SandboxRecord
from hutch.provider import CheckResult

log = logging.getLogger("hutch.local")
DEFAULT_DIR = Path("/var/lib/hutch/uids")
T = TypeVar("T")
POOL_SIZE = 1 << 24  # uids above uid_base a daemon may hand out
UID_LIMIT = (1 << 31) - 1  # stay clear of the (uid_t)-1 sentinel and signedness trouble


@dataclass(frozen=True)
class Entry:
    start: int
    count: int
    home: str  # the state directory (HUTCH_HOME) of the daemon that owns the sandbox
    sandbox: str
    dir: str  # the sandbox's directory: held while it exists
    pid: int  # the daemon that wrote the entry
    pid_start: int | None
    at: float

    @property
    def end(self) -> int:
        return self.start + self.count

    def overlaps(self, start: int, count: int) -> bool:
        return self.start < start + count and start < self.end

    def who(self) -> str:
        return f"sandbox {self.sandbox} of {self.home} (daemon pid {self.pid})"

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _start_time(pid: int) -> int | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    parts = data[data.rindex(b")") + 2 :].split()
    return None if parts[0] in (b"Z", b"X") else int(parts[19])


def _unheld(entries: list[Entry]) -> set[Entry]:
    """The entries nobody holds any more: their sandbox's directory is gone and so is the daemon
    that wrote them (each daemon's liveness is read once)."""
    alive: dict[int, int | None] = {}
    out: set[Entry] = set()
    for e in entries:
        if os.path.isdir(e.dir):
            continue
        if e.pid_start is not None:
            if e.pid not in alive:
                alive[e.pid] = _start_time(e.pid)
            if alive[e.pid] == e.pid_start:
                continue
        out.add(e)
    return out


def _held(entry: Entry) -> bool:
    return not _unheld([entry])


def covering(entries: list[Entry]) -> Callable[[int], bool]:
    """Whether some entry covers a uid (a bisect over the merged ranges)."""
    merged: list[tuple[int, int]] = []
    for e in sorted(entries, key=lambda e: e.start):
        if merged and e.start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e.end))
        else:
            merged.append((e.start, e.end))
    starts = [lo for lo, _ in merged]

    def covered(uid: int) -> bool:
        i = bisect.bisect_right(starts, uid) - 1
        return i >= 0 and uid < merged[i][1]

    return covered


def process_uids(low: int, high: int, skip: Callable[[int], bool] | None = None) -> dict[int, int]:
    """uid -> a pid running as it, for every process whose uid is in ``[low, high)``, less the
    uids ``skip`` says need no answer (those an entry holds anyway: no need to read their
    processes' state)."""
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{name}").st_uid  # the process's effective uid
        except OSError:
            continue
        wanted = low <= uid < high and uid not in found and (skip is None or not skip(uid))
        if wanted and _start_time(int(name)) is not None:  # a zombie holds nothing
            found[uid] = int(name)
    return found


class _Pass:
    """One batch's view of the registry: its entries, pruned and walked at most once."""

    def __init__(self, registry: UidRegistry, entries: list[Entry]) -> None:
        self.registry = registry
        self.entries = entries
        self._pruned = False
        self._walked: dict[int, int] | None = None
        self.released: list[tuple[int, int]] = []  # ranges freed in this batch stay busy until the next

    def prune(self) -> None:
        """Drop the entries nobody holds (once per batch)."""
        if not self._pruned:
            self._pruned = True
            gone = _unheld(self.entries)
            if gone:
                self.entries[:] = [e for e in self.entries if e not in gone]

    def walk(self) -> dict[int, int]:
        """The uids of the pool that processes run as, outside every entry (one walk per batch)."""
        if self._walked is None:
            self.registry.walks += 1
            reg = self.registry
            self._walked = process_uids(reg.low, reg.high, covering(self.entries))
        return self._walked


class _Call:
    """One queued change of the registry, and its answer."""

    def __init__(self, fn: Callable[[_Pass], object]) -> None:
        self.fn = fn
        self.done = threading.Event()  # answered, or woken to lead the next batch
        self.result: object = None
        self.error: BaseException | None = None
        self.served = False

    def answer(self) -> object:
        if self.error is not None:
            raise self.error
        return self.result


class UidRegistry:
    """The machine-wide registry, as seen by the daemon of ``home``."""

    def __init__(self, directory: Path, home: Path, base: int) -> None:
        self.dir = directory
        self.home = str(home)
        self.base = base
        self.low = base + 1
        self.high = min(base + 1 + POOL_SIZE, UID_LIMIT)
        self.file = directory / "registry.json"
        self.walks = 0  # walks of /proc so far (counted by the tests)
        self.batches = 0
        self._queue: list[_Call] = []
        self._mutex = threading.Lock()
        self._leading = False  # some thread serves the queue

    def queued(self) -> int:
        """How many calls wait for the next batch."""
        with self._mutex:
            return len(self._queue)

    def _call(self, fn: Callable[[_Pass], T]) -> T:
        """``fn`` run in the next batch. The first caller leads: it serves the queue once (its
        own call included, and every call queued meanwhile), then hands the lead to the
        oldest call still queued, which serves the next batch."""
        call = _Call(fn)
        with self._mutex:
            self._queue.append(call)
            lead = not self._leading
            self._leading = True
        if not lead:
            call.done.wait()
            if call.served:
                return cast(T, call.answer())
        self._serve()
        with self._mutex:
            if self._queue:
                self._queue[0].done.set()  # not served yet: it leads the next batch
            else:
                self._leading = False
        return cast(T, call.answer())

    def _serve(self) -> None:
        """One batch: every call queued when the lock is taken, one read and one write."""
        batch: list[_Call] = []

        def take() -> None:
            with self._mutex:
                batch.extend(self._queue)
                self._queue.clear()

        try:
            with self._locked() as entries:
                take()
                self.batches += 1
                one = _Pass(self, entries)
                for call in batch:
                    try:
                        call.result = call.fn(one)
                    except Exception as exc:  # noqa: BLE001 - the caller's to raise, not the batch's
                        call.error = exc
        except BaseException as exc:  # noqa: BLE001 - the registry failed: nothing of the batch was saved
            if not batch:
                take()
            for call in batch:
                call.error = exc
        for call in batch:
            call.served = True
            call.done.set()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Entry]]:
        """The entries, under the registry's lock; what the block leaves in the list is saved."""
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.dir / "registry.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise UnavailableError(
                f"cannot open the uid registry {self.dir}: {exc}",
                hint="set uid_registry (HUTCH_UID_REGISTRY) to a writable directory",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries = self._read()
            before = list(entries)
            yield entries
            if entries != before:
                self._write(entries)
        finally:
            os.close(fd)  # drops the lock

    def _read(self) -> list[Entry]:
        try:
            raw = json.loads(self.file.read_text())
            return [Entry(**e) for e in raw["entries"]]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UnavailableError(
                f"the uid registry {self.file} is unreadable: {exc}",
                hint="stop the root hutch daemons, then remove the file (their running sandboxes are recorded again on restart)",
            ) from exc

    def _write(self, entries: list[Entry]) -> None:
        tmp = self.file.with_name(f".registry.{os.getpid()}.tmp")
        data = json.dumps({"version": 1, "entries": [e.as_dict() for e in entries]}, separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.file)

    def _entry(self, sandbox: str, start: int, count: int, sandbox_dir: Path) -> Entry:
        pid = os.getpid()
        return Entry(start, count, self.home, sandbox, str(sandbox_dir), pid, _start_time(pid), time.time())

    def allocate(self, sandbox: str, sandbox_dir: Path, count: int = 1) -> int:
        """The first free range of ``count`` uids from ``uid_base + 1``, recorded as ``sandbox``'s."""

        def fn(one: _Pass) -> int:
            one.prune()  # reclaim what nobody holds any more
            entries = one.entries
            for e in entries:
                if e.home == self.home and e.sandbox == sandbox:
                    return e.start  # already ours (a retried create)
            busy = [(e.start, e.end) for e in entries] + one.released
            busy += [(uid, uid + 1) for uid in one.walk()]
            start = self.low
            for lo, hi in sorted(busy):
                if start + count <= lo:
                    break
                start = max(start, hi)
            if start + count > self.high:
                raise CapacityError(
                    f"no free host uids left between {self.low} and {self.high} ({len(entries)} sandboxes hold some)",
                    hint="destroy sandboxes you no longer need, or give this daemon another uid_base",
                )
            entries.append(self._entry(sandbox, start, count, sandbox_dir))
            return start

        return self._call(fn)

    def adopt(self, sandbox: str, sandbox_dir: Path, start: int, count: int = 1) -> str | None:
        """Record a running sandbox's uids (after a restart, or a lost registry).

        Returns why that is wrong when another sandbox holds any of them (it keeps running:
        ``doctor`` reports the overlap), else None.
        """

        def fn(one: _Pass) -> str | None:
            entries = one.entries
            mine = [e for e in entries if e.home == self.home and e.sandbox == sandbox]
            others = [e for e in entries if e not in mine and e.overlaps(start, count) and _held(e)]
            entries[:] = [e for e in entries if e not in mine]
            entries.append(self._entry(sandbox, start, count, sandbox_dir))
            if others:
                return f"host uid {start} of sandbox {sandbox} is also held by {others[0].who()}"
            return None

        return self._call(fn)

    def release(self, sandbox: str) -> None:
        def fn(one: _Pass) -> None:
            mine = [e for e in one.entries if e.home == self.home and e.sandbox == sandbox]
            one.released += [(e.start, e.end) for e in mine]  # the batch's walk did not look at them
            one.entries[:] = [e for e in one.entries if e not in mine]

        self._call(fn)

    def snapshot(self) -> list[Entry]:
        """The entries as they are (nothing reclaimed), for doctor."""
        with self._locked() as entries:
            return list(entries)

    def problems(self) -> list[str]:
        """Overlapping entries, and uids of this daemon's pool that run without an entry."""
        entries = [e for e in self.snapshot() if _held(e)]
        out: list[str] = []
        widest: Entry | None = None  # of the entries so far, the one reaching highest
        for e in sorted(entries, key=lambda e: e.start):
            if widest is not None and e.start < widest.end:
                out.append(f"host uid {e.start} is held by both {widest.who()} and {e.who()}")
            if widest is None or e.end > widest.end:
                widest = e
        for uid, pid in sorted(process_uids(self.low, self.high, covering(entries)).items()):
            out.append(f"host uid {uid} runs process {pid} but is in no registry entry")
        return out


def identity_check(registry: UidRegistry | None) -> CheckResult:
    """``hutch doctor``'s identity line: which host uids sandboxes run as, and whether any is shared."""
    if registry is None:
        return CheckResult("identity", True, f"sandboxes run as your uid {os.getuid()} (a registry is for root only)")
    try:
        entries = registry.snapshot()
        problems = registry.problems()
    except HutchError as exc:
        return CheckResult("identity", False, exc.message, exc.hint)
    ours = sum(1 for e in entries if e.home == registry.home)
    homes = {e.home for e in entries} - {registry.home}
    detail = (
        f"sandboxes run as host uids from {registry.low}, allocated machine-wide in {registry.dir}: "
        f"{len(entries)} held, {ours} by this state directory, {len(entries) - ours} by {len(homes)} other(s)"
    )
    if problems:
        return CheckResult(
            "identity",
            False,
            f"{detail}; {len(problems)} shared: " + "; ".join(problems[:5]),
            "destroy the sandboxes named, and run every root daemon of this machine with the same uid_registry",
        )
    return CheckResult("identity", True, detail + "; no uid is shared")


class SandboxUids:
    """The host uid each sandbox of one daemon runs as: as root, its own from the registry
    (a sub-agent's is its parent's, whose workspace it writes); otherwise the user's."""

    def __init__(self, settings: Settings, root: bool) -> None:
        directory = Path(settings.uid_registry) if settings.uid_registry else DEFAULT_DIR
        self.registry = UidRegistry(directory, settings.home, settings.uid_base) if root else None
        self.sandboxes_dir = settings.sandboxes_dir
        self._recorded: set[str] = set()  # sandboxes this daemon has (re)recorded

    def of(self, rec: SandboxRecord) -> int:
        """The host uid its workspace belongs to: in a sandbox with a range, its user's (the range's
        first uid is root inside)."""
        if self.registry is None:
            return os.getuid()
        data = rec.data.get("parent_data") or rec.data
        if data.get("uid") is None:
            data = rec.data
        return int(data["uid"]) + int((data.get("user") or {}).get("uid", 0))

    def _own(self, rec: SandboxRecord) -> bool:
        return self.registry is not None and not rec.data.get("parent_data")

    def allocate(self, rec: SandboxRecord, count: int = 1) -> SandboxRecord:
        """``rec`` with its host uid in ``data["uid"]`` (the first of ``count``), newly recorded."""
        if self.registry is None or not self._own(rec) or rec.data.get("uid") is not None:
            return rec
        uid = self.registry.allocate(rec.id, self.sandboxes_dir / rec.id, count)
        self._recorded.add(rec.id)
        return rec.model_copy(update={"data": rec.data | {"uid": uid, "uid_count": count}})

    def adopt(self, rec: SandboxRecord) -> None:
        """Record a running sandbox's uid under this daemon, once per daemon (a lost registry heals)."""
        if self.registry is None or not self._own(rec) or rec.id in self._recorded or "uid" not in rec.data:
            return
        self._recorded.add(rec.id)
        sdir = Path(rec.data.get("dir") or self.sandboxes_dir / rec.id)
        problem = self.registry.adopt(rec.id, sdir, int(rec.data["uid"]), int(rec.data.get("uid_count", 1)))
        if problem:
            log.warning("%s; see hutch doctor", problem)

    def release(self, sandbox_id: str) -> None:
        self._recorded.discard(sandbox_id)
        if self.registry is not None:
            self.registry.release(sandbox_id)

    def check(self) -> CheckResult:
        return identity_check(self.registry)
