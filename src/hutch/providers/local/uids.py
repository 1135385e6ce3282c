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
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from hutch.config import Settings
from hutch.errors import CapacityError, HutchError, UnavailableError
from hutch.models import SandboxRecord
from hutch.provider import CheckResult

log = logging.getLogger("hutch.local")
DEFAULT_DIR = Path("/var/lib/hutch/uids")
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


def _start_time(pid: int) -> int | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def _held(entry: Entry) -> bool:
    if os.path.isdir(entry.dir):
        return True
    return entry.pid_start is not None and _start_time(entry.pid) == entry.pid_start


def process_uids(low: int, high: int) -> dict[int, int]:
    """uid -> a pid running as it, for every process whose uid is in ``[low, high)``."""
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            uid = os.stat(f"/proc/{name}").st_uid  # the process's effective uid
            if low <= uid < high and _start_time(int(name)) is not None:  # a zombie holds nothing
                found.setdefault(uid, int(name))
    return found


class UidRegistry:
    """The machine-wide registry, as seen by the daemon of ``home``."""

    def __init__(self, directory: Path, home: Path, base: int) -> None:
        self.dir = directory
        self.home = str(home)
        self.base = base
        self.low = base + 1
        self.high = min(base + 1 + POOL_SIZE, UID_LIMIT)
        self.file = directory / "registry.json"

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
        data = json.dumps({"version": 1, "entries": [asdict(e) for e in entries]}, indent=1).encode()
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
        with self._locked() as entries:
            entries[:] = [e for e in entries if _held(e)]  # reclaim what nobody holds any more
            for e in entries:
                if e.home == self.home and e.sandbox == sandbox:
                    return e.start  # already ours (a retried create)
            busy = [(e.start, e.end) for e in entries]
            busy += [(uid, uid + 1) for uid in process_uids(self.low, self.high)]
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

    def adopt(self, sandbox: str, sandbox_dir: Path, start: int, count: int = 1) -> str | None:
        """Record a running sandbox's uids (after a restart, or a lost registry).

        Returns why that is wrong when another sandbox holds any of them (it keeps running:
        ``doctor`` reports the overlap), else None.
        """
        with self._locked() as entries:
            mine = [e for e in entries if e.home == self.home and e.sandbox == sandbox]
            others = [e for e in entries if e not in mine and e.overlaps(start, count) and _held(e)]
            entries[:] = [e for e in entries if e not in mine]
            entries.append(self._entry(sandbox, start, count, sandbox_dir))
        if others:
            return f"host uid {start} of sandbox {sandbox} is also held by {others[0].who()}"
        return None

    def release(self, sandbox: str) -> None:
        with self._locked() as entries:
            entries[:] = [e for e in entries if not (e.home == self.home and e.sandbox == sandbox)]

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
        for uid, pid in sorted(process_uids(self.low, self.high).items()):
            if not any(e.overlaps(uid, 1) for e in entries):
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
