"""hutch run's answer shown: the daemon does the whole run in one request (POST /v1/run);
here its frames become what ``hutch exec`` shows (the run's output, one document, or NDJSON),
with a line on stderr for the push and the kept sandbox."""

from __future__ import annotations

from hutch.cli.base import Ctx, say
from hutch.cli.foreground import follow, stdin_is_piped
from hutch.errors import HutchError

TYPE_CHECKING = False  # (typing, collections and contextlib stay out of hutch run's start)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from hutch import wire
    from hutch.client.oneshot import RunOnceStream

RUN_FRAMES = ("run", "stdout", "stderr", "exit", "error")


class Frames:
    """The run's frames for :func:`~hutch.cli.foreground.follow`; the others are taken here.
    ``close`` leaves the request open: :func:`run_once` reads it to its end (the sandbox is
    gone by then), or closes it, and the daemon destroys what the run made."""

    def __init__(self, obj: Ctx, answer: RunOnceStream, kept: bool) -> None:
        self.obj = obj
        self.answer = answer
        self.sandbox: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}  # added to the result: {"kept": SANDBOX} with --keep
        self.kept = kept

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for frame in self.answer:
            if frame["type"] in RUN_FRAMES:
                yield frame
            else:
                self._take(frame)

    def _take(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "sandbox":
            self.sandbox = frame
            if self.kept:
                self.extra["kept"] = frame["sandbox_id"]
        elif kind == "pushed" and not self.obj.json:
            say(f"hutch: pushed {frame['files_sent']} file(s) to {frame['sandbox']}")

    def drain(self) -> None:
        """The rest of the answer: the pull, the destroy; a failure there raises."""
        for frame in self.answer:
            if frame["type"] == "error":
                raise HutchError.from_dict(frame)
            if frame["type"] not in RUN_FRAMES:
                self._take(frame)

    def close(self) -> None:
        """Nothing yet: see :func:`run_once`."""


def run_once(obj: Ctx, req: wire.RunOnceRequest, sync: str | None, stream: bool, kept: bool) -> tuple[dict[str, Any], str]:
    """Run, show it as exec does; the result (``kept``: it names the sandbox) and the sandbox's id."""
    exec_req = req["exec"]
    stdin = 0 if "stdin" not in exec_req and stdin_is_piped() else None
    if sync:  # a bar only for a push
        from hutch.cli.progress import progress_bar

        with progress_bar(obj, "pushing") as advance:
            answer = obj.client.run_once(req, sync=sync, stdin=stdin, progress=advance)
    else:
        answer = obj.client.run_once(req, stdin=stdin)
    frames = Frames(obj, answer, kept)
    try:
        cap = int(exec_req.get("max_output") or obj.settings.output_cap)
        try:
            result = follow(obj, lambda: frames, cap, obj.json and stream, frames.extra)
        except (HutchError, SystemExit):  # a failure (with --stream --json: said already, as its exit code)
            try:  # noqa: SIM105 - (contextlib stays out of hutch run's start)
                frames.drain()  # the sandbox goes before this command ends
            except HutchError:
                pass
            raise
        frames.drain()
    finally:
        answer.close()
    return result, str(frames.sandbox.get("sandbox_id", ""))
