"""The ``unikraft`` provider: sandboxes as Unikraft Cloud instances with the sandbox plugin.

I/O only. The claim workflow (intent before create, adoption after an ambiguous create,
delete by UUID with proof of absence) is the Service's (``hutch.service.claims``); this
module offers the single calls it needs (:mod:`.claims`) and the core Provider methods,
which go through the platform's authenticated plugin API.

A foreground exec costs three requests: start the command, wait for it, read its logs.
The exit code rides at the end of stderr behind a per-run random marker (the wrapper
prints it), so no inspect call is needed; without the marker (the wrapper was killed) a
fourth request inspects the command.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hutch.config import Settings
from hutch.errors import HutchError, InternalError, InvalidError, UnavailableError
from hutch.models import RawOutput, SandboxRecord
from hutch.provider import Capabilities, CheckResult, ExecSpec
from hutch.providers.unikraft.api import Reply
from hutch.providers.unikraft.claims import OPTIONS, ClaimsMixin
from hutch.providers.unikraft.connection import ConnectionMixin
from hutch.providers.unikraft.files import FilesMixin
from hutch.providers.unikraft.output import OutputMixin
from hutch.providers.unikraft.settings import UnikraftSettings
from hutch.providers.unikraft.ssh import SshTransferMixin
from hutch.providers.unikraft.wire import HOLD, marker, scrubber, split_marker, wrap

NO_TERMINAL = (
    "run one command with hutch exec SANDBOX -- CMD (its input with --stdin-file); "
    "for a terminal, use hutch ssh SANDBOX on a sandbox created with --ssh"
)


class UnikraftProvider(ConnectionMixin, ClaimsMixin, SshTransferMixin, FilesMixin, OutputMixin):
    """Core provider, plus claims (:mod:`.claims`), transfer over SSH (:mod:`.ssh`), SSH
    endpoints and the ``metro`` and ``ssh`` provider options."""

    name = "unikraft"
    capabilities = Capabilities(
        limits=frozenset({"memory"}),
        survives_daemon=True,
        images=True,
        options=OPTIONS,
        transfer=True,
        ssh=True,
        claims=True,
    )

    def __init__(self, settings: Settings) -> None:
        self.config = UnikraftSettings.of(settings)
        ConnectionMixin.__init__(self, self.config.timeout)

    # -- Provider protocol -------------------------------------------------------------------

    async def check(self) -> list[CheckResult]:
        from hutch.providers.unikraft.doctor import checks

        return await checks(self)

    async def create(self, rec: SandboxRecord) -> tuple[dict[str, Any], dict[str, str]]:
        raise InternalError("unikraft sandboxes are created through claims (Service.create)")

    async def alive(self, rec: SandboxRecord) -> bool:
        try:
            inst = await self.lookup(self.endpoint_for(rec), str(rec.data["uuid"]), account=self.account_of(rec))
        except HutchError:
            return True  # cannot tell: keep it (it survives us; cleanup settles it)
        return inst is not None and inst.get("state") not in ("stopped", "stopping")

    async def destroy(self, rec: SandboxRecord) -> bool:
        raise InternalError("unikraft sandboxes are destroyed through claims (Service.destroy)")

    # -- runs ----------------------------------------------------------------------------------

    def _dir(self, rec: SandboxRecord) -> Path:
        d = self.config.home / "unikraft" / rec.id
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return d

    async def _plugin(
        self, rec: SandboxRecord, method: str, path: str, what: str, *, ok: tuple[int, ...] = (200,), **kw: Any
    ) -> Reply:
        api = await self.api(self.endpoint_for(rec), self.account_of(rec))
        reply = await api.plugin(str(rec.data["uuid"]), method, path, what, idempotent=method == "GET", **kw)
        if reply.status not in ok:
            raise api.fail(reply, what)
        return reply

    async def exec(self, rec: SandboxRecord, spec: ExecSpec) -> RawOutput:
        run_id, argv, stdin, redact, on_output = spec.run_id, spec.argv, spec.stdin, spec.redact, spec.on_output
        timeout, idle_timeout = spec.timeout, spec.idle_timeout
        scrub = scrubber(redact)
        shown = {"stdout": 0, "stderr": 0}  # bytes passed to on_output (after scrubbing)
        if on_output is not None:
            raw_output = on_output

            async def on_scrubbed(name: str, chunk: bytes) -> None:
                chunk = scrub(chunk) if redact else chunk
                shown[name] += len(chunk)
                await raw_output(name, chunk)

            on_output = on_scrubbed
        if spec.interactive is not None:
            raise InvalidError("the unikraft provider has no interactive runs", hint=NO_TERMINAL)
        nonce = secrets.token_hex(8)
        body: dict[str, Any] = {"cmd": wrap(argv, nonce, stdin is not None), "cwd": spec.cwd}
        if spec.env:
            body["env"] = spec.env
        reply = await self._plugin(rec, "POST", "/commands", "starting the command", body=body)
        cmd = str(reply.data.get("uuid") or "")
        if not cmd:
            raise UnavailableError("the sandbox plugin did not return a command uuid", hint="retry")
        meta = {"command": cmd, "nonce": nonce, "started_at": time.time()}
        (self._dir(rec) / f"{run_id}.json").write_text(json.dumps(meta))
        if stdin is not None:
            data = base64.b64encode(stdin).decode()
            await self._plugin(rec, "POST", f"/commands/{cmd}/stdin", "feeding stdin", body={"data": data, "eof": True})
        if spec.on_start is not None:  # the command runs in the instance and its record is on disk
            spec.on_start()
        sent = {"stdout": 0, "stderr": 0}
        deadline = time.monotonic() + timeout if timeout else None
        last_output = time.monotonic()
        reason = None
        watch = on_output is not None or idle_timeout is not None
        quiet = 0.25  # while watching: 0.25 s after output, growing to 2 s while there is none
        while True:
            step = 3600.0 if not watch else quiet
            if idle_timeout is not None:
                step = max(0.05, min(step, idle_timeout - (time.monotonic() - last_output)))
            if deadline is not None:
                step = max(0.0, min(step, deadline - time.monotonic()))
            wait = await self._plugin(
                rec,
                "POST",
                f"/commands/{cmd}/wait_timeout",
                "waiting",
                ok=(200, 408),
                body={"timeout_s": step},
                timeout=step + 30,
            )
            done = wait.status == 200
            if watch and not done:
                grew = await self._follow(rec, cmd, sent, on_output)
                if grew:
                    last_output = time.monotonic()
                quiet = 0.25 if grew else min(2.0, quiet * 1.5)
            if done:
                break
            if deadline is not None and time.monotonic() >= deadline:
                reason = "timeout"
            elif idle_timeout is not None and time.monotonic() - last_output >= idle_timeout:
                reason = "idle_timeout"
            if reason:
                await self._plugin(rec, "POST", f"/commands/{cmd}/signal", "stopping the command", body={"signal": 9})
                await self._plugin(rec, "POST", f"/commands/{cmd}/wait_timeout", "waiting", ok=(200, 408), body={"timeout_s": 10})
                break
        raw = await self._finish(rec, run_id, cmd, nonce, spec.max_output, reason, scrub)
        if on_output is not None:  # the rest of the output, whole (not only what the result keeps)
            totals = {"stdout": raw.stdout_bytes, "stderr": raw.stderr_bytes}
            await self._drain(rec, cmd, sent, totals, on_output)
            # counted as streamed: what the plugin no longer had shows as missing (the stream is truncated)
            counts = {n: shown[n] + max(0, totals[n] - sent[n]) for n in totals}
            raw = raw.model_copy(update={"stdout_bytes": counts["stdout"], "stderr_bytes": counts["stderr"]})
        return raw

    async def _finish(
        self,
        rec: SandboxRecord,
        run_id: str,
        cmd: str,
        nonce: str,
        cap: int,
        reason: str | None,
        scrub: Callable[[bytes], bytes] = bytes,
    ) -> RawOutput:
        ranges = {"stdout": {"offset": 0, "limit": cap}, "stderr": {"offset": 0, "limit": cap + HOLD}}
        reply = await self._plugin(rec, "GET", f"/commands/{cmd}/logs", "reading output", body=ranges)
        out = base64.b64decode(reply.data.get("stdout") or "")
        err = base64.b64decode(reply.data.get("stderr") or "")
        out_total = int(reply.data.get("stdout_available") or len(out))
        err_total = int(reply.data.get("stderr_available") or len(err))
        if err_total > len(err):  # the marker is at the very end: read the tail
            tail = {"stdout": {"offset": out_total, "limit": 0}, "stderr": {"offset": max(0, err_total - HOLD)}}
            extra = await self._plugin(rec, "GET", f"/commands/{cmd}/logs", "reading output", body=tail)
            _, code = split_marker(base64.b64decode(extra.data.get("stderr") or ""), nonce)
            marker_len = len(marker(nonce)) + len(str(code)) + 1 if code is not None else 0
        else:
            err, code = split_marker(err, nonce)
            marker_len = err_total - len(err) if code is not None else 0
        if code is None:  # the wrapper itself was killed
            info = await self._plugin(rec, "GET", f"/commands/{cmd}", "inspecting the command")
            code = info.data.get("exitcode")
            code = 137 if code is None else int(code)
        err_total -= marker_len
        raw = RawOutput(
            exit_code=124 if reason else code,
            signal=9 if reason else (code - 128 if code > 128 else 0),
            stdout=scrub(out[:cap]),
            stderr=scrub(err[:cap]),
            stdout_bytes=out_total,
            stderr_bytes=err_total,
            truncated_on_disk=out_total > cap or err_total > cap,  # the stored copy is what the result keeps
            timed_out=reason is not None,
            reason=reason,
            finished_at=time.time(),
        )
        self._store(rec, run_id, raw)
        return raw

    def _store(self, rec: SandboxRecord, run_id: str, raw: RawOutput) -> None:
        d = self._dir(rec)
        (d / f"{run_id}.stdout").write_bytes(raw.stdout)
        (d / f"{run_id}.stderr").write_bytes(raw.stderr)
        (d / f"{run_id}.status").write_text(raw.model_dump_json(exclude={"stdout", "stderr"}))
        with open(d / "transcript.jsonl", "a") as f:
            for name in ("stdout", "stderr"):
                data = getattr(raw, name)
                if data:
                    f.write(json.dumps({"run_id": run_id, "stream": name, "data": base64.b64encode(data).decode()}) + "\n")

    def _meta(self, rec: SandboxRecord, run_id: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self._dir(rec) / f"{run_id}.json").read_text()))
        except (OSError, ValueError):
            return None

    async def run_status(self, rec: SandboxRecord, run_id: str) -> RawOutput | None:
        path = self._dir(rec) / f"{run_id}.status"
        if path.exists():
            return RawOutput.model_validate_json(path.read_text())
        meta = self._meta(rec, run_id)
        if meta is None:
            return None
        info = await self._plugin(rec, "GET", f"/commands/{meta['command']}", "inspecting the command", ok=(200, 404))
        if info.status == 404 or info.data.get("exitcode") is None:
            return None
        return await self._finish(rec, run_id, meta["command"], meta["nonce"], self.config.output_cap, None)

    async def runs_alive(self, rec: SandboxRecord) -> set[str]:
        alive = set()
        for meta_path in self._dir(rec).glob("run_*.json"):
            run_id = meta_path.stem
            if (self._dir(rec) / f"{run_id}.status").exists():
                continue
            meta = self._meta(rec, run_id) or {}
            info = await self._plugin(rec, "GET", f"/commands/{meta.get('command')}", "inspecting", ok=(200, 404))
            if info.status == 200 and info.data.get("exitcode") is None:
                alive.add(run_id)
        return alive

    async def kill_run(self, rec: SandboxRecord, run_id: str, sig: int) -> bool:
        meta = self._meta(rec, run_id)
        if meta is None or (self._dir(rec) / f"{run_id}.status").exists():
            return False
        await self._plugin(rec, "POST", f"/commands/{meta['command']}/signal", "signalling", ok=(200, 404), body={"signal": sig})
        return True

    async def read_output(self, rec: SandboxRecord, run_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        path = self._dir(rec) / f"{run_id}.{stream}"
        if path.exists():
            data = path.read_bytes()
            return data[offset : offset + limit], len(data)
        meta = self._meta(rec, run_id)
        if meta is None:
            return b"", 0
        other = "stderr" if stream == "stdout" else "stdout"
        ranges = {stream: {"offset": offset, "limit": limit}, other: {"offset": 0, "limit": 0}}
        reply = await self._plugin(rec, "GET", f"/commands/{meta['command']}/logs", "reading output", body=ranges)
        data = base64.b64decode(reply.data.get(stream) or "")
        size = int(reply.data.get(f"{stream}_available") or 0)
        if stream == "stderr":  # never hand out what may be the exit marker
            size = max(0, size - HOLD)
            data = data[: max(0, size - offset)]
        return data, size

    async def read_transcript(self, rec: SandboxRecord, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
        path = self._dir(rec) / "transcript.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        records: list[dict[str, Any]] = []
        used = 0
        for i, line in enumerate(lines[offset:], start=offset):
            entry = json.loads(line)
            data = base64.b64decode(entry["data"])
            if records and used + len(data) > limit:
                break
            records.append({"offset": i, "run_id": entry["run_id"], "stream": entry["stream"], "data": data})
            used += len(data)
        return records, offset + len(records), len(lines)

    async def _sh(self, rec: SandboxRecord, script: str, timeout: float = 60.0) -> RawOutput:
        spec = ExecSpec(
            run_id="run_internal" + secrets.token_hex(6),
            argv=["/bin/sh", "-c", script],
            cwd="/",
            timeout=timeout,
            max_output=8 << 20,
        )
        return await self.exec(rec, spec)

    async def ps(self, rec: SandboxRecord) -> list[dict[str, Any]]:
        raw = await self._sh(rec, "ps -eo pid=,ppid=,user=,stat=,rss=,args= 2>/dev/null")
        procs = []
        for line in raw.stdout.decode(errors="replace").splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[0].isdigit():
                pid, ppid, user, state, rss, command = parts
                procs.append(
                    {"pid": int(pid), "ppid": int(ppid), "user": user, "state": state, "rss": int(rss) * 1024, "command": command}
                )
        return procs
