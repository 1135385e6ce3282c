"""A foreground run of exec and run: events in, output out, one exit code.

Every foreground run is streamed from the daemon (exec: NDJSON, or the attach WebSocket when
this process's stdin goes to the command; run: the frames of POST /v1/run, see
:mod:`hutch.cli.oneshot`), so the run id is known from the first event: Ctrl-C kills the
run and says so. With ``--json`` (without ``--stream``) the output is
gathered here, at most ``max_output`` bytes per stream, into one result document.
"""

from __future__ import annotations

import os
import stat
import sys

from hutch.casts import cast
from hutch.cli.base import EXIT_HUTCH, EXIT_TIMEOUT, Ctx, emit, exit_code_for, say
from hutch.errors import HutchError, InvalidError, TimeoutError_, UnavailableError
from hutch.wire.build import with_stdin

# typing, base64, contextlib and threading stay out of the plain paths' start, and so does
# signal.py (its enums import enum): the C module under it has what a Ctrl-C guard needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Generator, Iterator, Mapping
    from typing import Any, Protocol

    from hutch import wire
else:
    import _signal as signal

EXIT_INTERRUPTED = 130  # 128 + SIGINT, like a shell
KILL_WAIT = 10.0  # how long Ctrl-C waits for the killed run's record


def stdin_is_piped() -> bool:
    """This process's stdin carries data for the command: a pipe, a socket or a non-empty
    file (a terminal is forwarded only with -i; /dev/null and a closed stdin are nothing)."""
    try:
        st = os.fstat(0)
    except OSError:
        return False
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_size > 0)


def write_chunk(stream: str, data: str, b64: bool) -> None:
    out = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
    out.write(_unb64(data) if b64 else data.encode())
    out.flush()


def _unb64(data: str) -> bytes:
    import base64  # here: most output is text

    return base64.b64decode(data)


def spawn_hint(result: dict[str, Any]) -> str | None:
    """What to do about a command that could not start (exit 126/127 with an error)."""
    import shlex

    error, sbx = str(result.get("error") or ""), result.get("sandbox_id") or "SANDBOX"
    code = int(result["exit_code"])
    if code == 127 and error.startswith("command not found: "):
        name = error.removeprefix("command not found: ")
        if "/" in name:
            return f"no such file; list the directory with: hutch ls {sbx} {shlex.quote(os.path.dirname(name) or '.')}"
        return f"is it installed in the sandbox? look for it with: hutch exec {sbx} -- sh -c {shlex.quote('command -v ' + name)}"
    if code == 126 and error.startswith("working directory ") and error.endswith(" does not exist"):
        where = error.removeprefix("working directory ").removesuffix(" does not exist")
        return f"create it first (hutch exec {sbx} -- mkdir -p {shlex.quote(where)}), or give another --cwd"
    if code == 126 and error.startswith("cannot run "):
        said = error.lower()
        if "exec format error" in said:  # executable, but no program: a script without its #! line
            return "start the script with a #! line (#!/bin/sh), or run it through its interpreter (sh FILE, python3 FILE)"
        if "resource temporarily unavailable" in said or "cannot allocate memory" in said:
            return f"the sandbox is at its process or memory limit (--pids, --memory when created): see hutch ps {sbx}"
        return "make it executable (chmod +x FILE), or run it through its interpreter (sh FILE, python3 FILE)"
    return None


def explain(result: dict[str, Any]) -> None:
    """hutch's notes about a finished run, on stderr (after the output)."""
    code = int(result["exit_code"])
    if result.get("truncated"):
        say(f"hutch: {truncation(result)}")
    if result.get("interrupted"):
        say(f"hutch: interrupted: {result.get('error')}")
    elif result["status"] == "timed_out":
        say("hutch: timed out; the command's process tree was killed")
    elif result["status"] == "oom_killed":
        say("hutch: the command was killed: out of memory (raise --memory)")
    elif result["status"] == "killed":
        say(f"hutch: the command was killed (signal {result.get('signal')})")
    elif result.get("error") and code in (125, 126, 127):
        say(f"hutch: {result['error']}")
        hint = spawn_hint(result)
        if hint:
            say(f"hint: {hint}")


def truncation(result: dict[str, Any]) -> str:
    where = f"stdout {result.get('stdout_bytes', 0)} bytes, stderr {result.get('stderr_bytes', 0)} bytes written"
    if result.get("stored_truncated"):
        return (
            f"output truncated ({where}); the copy kept on disk stops at the disk cap too, so the rest is lost: "
            "stream it whole with hutch exec (without --json, or with --stream), or write it to a file in the sandbox"
        )
    return (
        f"output truncated at --max-output ({where}); the whole output: hutch poll {result.get('run_id')}, "
        "or a larger --max-output, or --stream"
    )


def exit_with(result: dict[str, Any]) -> None:
    """The exit code of a foreground run: the workload's own, 124 when it timed out, 130 when
    Ctrl-C stopped it, and 125 instead of 0 when a cap cut the output this command returns."""
    if result.get("interrupted"):
        raise SystemExit(EXIT_INTERRUPTED)
    if result["status"] == "timed_out":
        raise SystemExit(EXIT_TIMEOUT)
    code = int(result["exit_code"])
    raise SystemExit(EXIT_HUTCH if code == 0 and result.get("truncated") else code)


class _Interrupts:
    """Ctrl-C before the run has an id is held until it has one (a second Ctrl-C aborts at
    once); from then on it raises KeyboardInterrupt, which kills the run."""

    def __init__(self) -> None:
        self.held = False
        self.waiting = True
        self.previous: Any = None
        if guard_ok() and signal.getsignal(signal.SIGINT) != signal.SIG_IGN:  # an ignored SIGINT stays ignored
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.waiting and not self.held:
            self.held = True
            return
        raise KeyboardInterrupt

    def started(self) -> None:
        self.waiting = False
        if self.held:
            raise KeyboardInterrupt

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None


class _Output:
    """What --json (without --stream) returns of each stream: the first ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = {"stdout": bytearray(), "stderr": bytearray()}
        self.seen = {"stdout": 0, "stderr": 0}

    def add(self, name: str, data: str, b64: bool) -> None:
        raw = _unb64(data) if b64 else data.encode()
        self.seen[name] += len(raw)
        room = self.cap - len(self.data[name])
        if room > 0:
            self.data[name] += raw[:room]

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, raw in self.data.items():
            try:
                text = raw.decode("utf-8")
                b64 = "\x00" in text
            except UnicodeDecodeError:
                b64 = True
            if b64:
                import base64

                text = base64.b64encode(raw).decode("ascii")
            out[name] = text
            out[f"{name}_base64"] = b64
        return out


RESULT_ORDER = ("run_id", "sandbox_id", "exit_code", "status", "stdout", "stderr", "stdout_base64", "stderr_base64")


def _document(final: dict[str, Any], output: _Output) -> dict[str, Any]:
    """The one result document of --json: the exit event plus the output gathered here."""
    body = {k: v for k, v in final.items() if k != "type"} | output.fields()
    cut = any(body.get(f"{n}_bytes", output.seen[n]) > len(output.data[n]) for n in ("stdout", "stderr"))
    body["truncated"] = bool(body.get("truncated")) or cut
    return {k: body[k] for k in RESULT_ORDER if k in body} | {k: v for k, v in body.items() if k not in RESULT_ORDER}


if TYPE_CHECKING:

    class Events(Protocol):
        def __iter__(self) -> Iterator[dict[str, Any]]: ...
        def close(self) -> None: ...


def events_for(obj: Ctx, ref: str, req: wire.ExecRequest, interactive: bool, tty: bool) -> Events:
    """The run's events: the NDJSON stream, or the attach WebSocket when stdin goes to the command.

    A piped stdin is streamed; a provider without live input refuses the attach before the
    run exists, and then gets the input whole in the request (up to MAX_WHOLE_STDIN)."""
    if interactive or tty:
        from hutch.cli.interactive import Attached

        return Attached(obj, ref, req, tty)
    if "stdin" not in req and stdin_is_piped():
        from hutch.cli.interactive import Attached  # here: a plain run does not load the attach client

        attached = Attached(obj, ref, req, False)
        first = attached.first()
        if first.get("type") != "error" or first.get("error", {}).get("kind") != "invalid":
            return attached
        attached.close()  # refused (no live input there, or bad input): the plain request says which
        req = with_stdin(req, _whole_stdin(ref))
    return cast("Generator[dict[str, Any], None, None]", obj.client.exec_stream(ref, req))


MAX_WHOLE_STDIN = 64 << 20  # what a request body carries (base64 in JSON)


def _whole_stdin(ref: str) -> bytes:
    data = sys.stdin.buffer.read(MAX_WHOLE_STDIN + 1)
    if len(data) > MAX_WHOLE_STDIN:
        raise InvalidError(
            f"stdin is over 64 MiB, and {ref}'s provider takes a command's input only whole",
            hint=f"put the data in the sandbox first (hutch write {ref} PATH < FILE, or hutch push) and read it from there",
        )
    return data


def execute(
    obj: Ctx,
    ref: str,
    req: wire.ExecRequest,
    stream: bool,
    extra: dict[str, Any] | None = None,
    *,
    interactive: bool = False,
    tty: bool = False,
) -> dict[str, Any]:
    """Run in the foreground: live output, NDJSON with --json --stream (and -i/-t), or one
    result document with --json. Returns the final result (``interrupted`` after Ctrl-C)."""
    lines = obj.json and (stream or interactive or tty)
    cap = int(req.get("max_output") or obj.settings.output_cap)
    return follow(obj, lambda: events_for(obj, ref, req, interactive, tty), cap, lines, extra)


def follow(
    obj: Ctx, open_events: Callable[[], Events], cap: int, lines: bool, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A foreground run's events (from ``open_events``, called once Ctrl-C is guarded) shown
    as they come: NDJSON with ``lines``, the output, or one result document with --json
    (each stream up to ``cap`` bytes). Returns the final result (``interrupted`` after Ctrl-C)."""
    output = _Output(cap)
    started: dict[str, Any] = {}
    final: dict[str, Any] | None = None
    guard = _Interrupts()
    try:
        events = open_events()
        try:
            for event in events:
                kind = event.get("type")
                if kind == "run":
                    started = event
                    guard.started()
                elif kind == "exit":
                    final = event | (extra or {})
                    event = final
                if lines:
                    emit(event, line=True)
                elif kind in ("stdout", "stderr"):
                    if obj.json:
                        output.add(kind, event["data"], bool(event.get("base64")))
                    else:
                        write_chunk(kind, event["data"], bool(event.get("base64")))
                if kind == "error":
                    err = HutchError.from_dict(event)
                    if lines:  # already printed as the stream's last event
                        raise SystemExit(exit_code_for(err, run_command=True))
                    raise err
                if kind == "exit":
                    break
        except KeyboardInterrupt:
            if not started:
                raise
            return _interrupted(obj, started, output, lines, extra)
        except UnavailableError as exc:
            if not started:
                raise
            run_id = started["run_id"]  # the daemon went away under the run: say which run, and how to find it
            raise UnavailableError(
                f"lost the daemon during {run_id} ({exc.message}); the run itself may still be going",
                hint=f"hutch poll --follow {run_id} shows it (the next hutch command starts the daemon again)",
            ) from exc
        except BrokenPipeError:
            if started:  # our stdout was closed (| head): end the run like a pipeline ends its writer
                import contextlib

                with contextlib.suppress(HutchError):
                    obj.client.kill(str(started["run_id"]), int(signal.SIGPIPE))
            raise
        finally:
            events.close()  # the connection: a plain run goes on, an attached one is hung up
    finally:
        guard.restore()
    if final is None:
        run = started.get("run_id", "RUN")
        raise UnavailableError("the output stream ended before the run did", hint=f"see hutch runs SANDBOX and hutch poll {run}")
    result = _document(final, output) if obj.json and not lines else final
    if obj.json and not lines:
        emit(result)
    if obj.json:
        if result.get("truncated"):  # the document says so; stderr says so too
            say(f"hutch: {truncation(result)}")
    else:
        explain(result)
    return result


def _interrupted(obj: Ctx, started: dict[str, Any], output: _Output, lines: bool, extra: dict[str, Any] | None) -> dict[str, Any]:
    """Ctrl-C: kill the run's whole process tree, wait (briefly) for its record, report it."""
    run_id = str(started["run_id"])
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if guard_ok() else None
    try:
        obj.client.kill(run_id, "KILL")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    record: Mapping[str, Any] = {"status": "running", "exit_code": None}
    import contextlib  # (here: only Ctrl-C comes this way)

    with contextlib.suppress(TimeoutError_, KeyboardInterrupt):  # a second Ctrl-C: stop waiting
        record = obj.client.wait(run_id, KILL_WAIT)
    ended = record["status"] != "running"
    message = f"{run_id} killed (Ctrl-C)" if ended else f"sent SIGKILL to {run_id}; it has not ended yet (see hutch runs)"
    result: dict[str, Any] = {
        "run_id": run_id,
        "sandbox_id": started.get("sandbox_id"),
        "exit_code": EXIT_INTERRUPTED if record.get("exit_code") is None else record["exit_code"],
        "status": record["status"],
        "stdout_bytes": record.get("stdout_bytes") or output.seen["stdout"],
        "stderr_bytes": record.get("stderr_bytes") or output.seen["stderr"],
        "truncated": False,
        "stored_truncated": bool(record.get("truncated")),
        "duration_ms": record.get("duration_ms") or 0.0,
        "signal": record.get("signal"),
        "error": message,
        "interrupted": True,
    } | (extra or {})
    if lines:
        emit({"type": "exit"} | result, line=True)
    elif obj.json:
        emit(_document(result, output))
    else:
        say(f"hutch: interrupted: {message}")
    return result


def guard_ok() -> bool:
    """This is the main thread (only it may set a signal handler). A process that never
    imported threading started no thread with it: the CLI's own case, known without it."""
    threading = sys.modules.get("threading")
    return threading is None or bool(threading.current_thread() is threading.main_thread())
