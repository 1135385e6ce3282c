"""The code interpreter's server, run INSIDE a sandbox (never imported by hutch).

hutch sends this file's source to the sandbox's ``python3`` on stdin when the first request
for port 49999 arrives (:mod:`hutch.server.e2b.ports`); it serves what
``e2b-code-interpreter`` calls there, over real ipykernel kernels:

- ``POST /execute`` ``{code, context_id, language, env_vars}``: one JSON object a line, as
  the kernel answers: ``stdout``/``stderr`` ``{text, timestamp}``, ``result`` (the MIME bundle
  as ``text``, ``png``, ``html``..., ``is_main_result`` for the cell's value), ``error``
  ``{name, value, traceback}``, ``number_of_executions``; a client that goes away interrupts
  the kernel.
- ``GET/POST /contexts``, ``DELETE /contexts/ID``, ``POST /contexts/ID/restart``: kernels of
  their own (state kept between calls of one context, none shared between two).
- ``GET /health``.

Only the standard library and ``jupyter_client`` (which ipykernel brings): the image needs
``python3`` with ipykernel. It listens on 127.0.0.1 (hutch connects from inside the
sandbox's network namespace).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PORT = 49999
MAX_BODY = 16 << 20
MIME = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
LANGUAGES = {"python": "python3"}


class GoneError(Exception):
    """The client went away in the middle of an execution."""


class Context:
    def __init__(self, language: str, cwd: str) -> None:
        manager = importlib.import_module("jupyter_client.manager")  # checked at start (main)
        self.id, self.language, self.cwd = uuid.uuid4().hex, language, cwd
        self.lock = threading.Lock()
        self.km, self.kc = manager.start_new_kernel(kernel_name=LANGUAGES[language], cwd=cwd, startup_timeout=120)

    def describe(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def restart(self) -> None:
        with self.lock:
            self.km.restart_kernel(now=True)
            self.kc.wait_for_ready(timeout=120)

    def _quiet(self, code: str) -> None:
        self._drain(self.kc.execute(code, silent=True, store_history=False), lambda _m: None)

    def _drain(self, msg_id: str, emit: Any) -> None:
        """Pass the kernel's messages for ``msg_id`` to ``emit`` until it is idle again."""
        gone = False
        while True:
            msg = self.kc.get_iopub_msg(timeout=None)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                if gone:
                    raise GoneError()
                return
            line = to_line(kind, content)
            if line is None or gone:
                continue
            try:
                emit(line)
            except OSError:
                gone = True  # stop the code, then keep reading until the kernel is idle
                self.km.interrupt_kernel()

    def execute(self, code: str, envs: dict[str, str], emit: Any) -> None:
        with self.lock:
            if envs:
                self._quiet(
                    "import os as _hutch_os\n"
                    f"_hutch_saved = {{k: _hutch_os.environ.get(k) for k in {list(envs)!r}}}\n"
                    f"_hutch_os.environ.update({envs!r})\n"
                )
            try:
                self._drain(self.kc.execute(code, store_history=True, allow_stdin=False), emit)
            finally:
                if envs:
                    self._quiet(
                        "for _k, _v in _hutch_saved.items():\n"
                        "    _hutch_os.environ.pop(_k, None) if _v is None else _hutch_os.environ.__setitem__(_k, _v)\n"
                        "del _hutch_saved\n"
                    )


def to_line(kind: str, content: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "stream":
        return {"type": content.get("name", "stdout"), "text": content.get("text", ""), "timestamp": time.time_ns()}
    if kind in ("execute_result", "display_data"):
        out: dict[str, Any] = {"type": "result", "is_main_result": kind == "execute_result"}
        extra = {}
        for mime, value in content.get("data", {}).items():
            if mime in MIME:
                out[MIME[mime]] = value
            else:
                extra[mime] = value
        if extra:
            out["extra"] = extra
        return out
    if kind == "error":
        trace = "\n".join(content.get("traceback", []))
        return {"type": "error", "name": content.get("ename", ""), "value": content.get("evalue", ""), "traceback": trace}
    if kind == "execute_input":
        return {"type": "number_of_executions", "execution_count": content.get("execution_count", 0)}
    return None


class Contexts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.all: dict[str, Context] = {}
        self.defaults: dict[str, str] = {}

    def new(self, language: str, cwd: str) -> Context:
        ctx = Context(language, cwd)
        with self.lock:
            self.all[ctx.id] = ctx
        return ctx

    def default(self, language: str) -> Context:
        with self.lock:  # one default per language, started once
            found = self.all.get(self.defaults.get(language, ""))
            if found is None:
                found = Context(language, os.getcwd())
                self.all[found.id] = found
                self.defaults[language] = found.id
            return found


CONTEXTS = Contexts()


def language_of(given: object) -> str:
    language = "python" if given in (None, "", "python3") else given
    if language not in LANGUAGES:
        raise ValueError(f"language {given!r} is not served here (hutch's code interpreter runs: python)")
    return str(language)


class Handler(BaseHTTPRequestHandler):
    server_version = "hutch-code-interpreter"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self) -> dict[str, Any]:
        size = int(self.headers.get("Content-Length") or 0)
        if size > MAX_BODY:
            raise ValueError(f"a body of {size} bytes is over the limit of {MAX_BODY}")
        raw = self.rfile.read(size) if size else b"{}"
        doc = json.loads(raw or b"{}")
        if not isinstance(doc, dict):
            raise ValueError("the body is a JSON object")
        return doc

    def do_GET(self) -> None:
        if self.path == "/health":
            self.answer(200, "OK")
        elif self.path == "/contexts":
            self.answer(200, [c.describe() for c in list(CONTEXTS.all.values())])
        else:
            self.answer(404, f"no route {self.path}")

    def do_DELETE(self) -> None:
        parts = self.path.strip("/").split("/")
        ctx = CONTEXTS.all.pop(parts[1], None) if len(parts) == 2 and parts[0] == "contexts" else None
        if ctx is None:
            self.answer(404, f"context {parts[-1]} not found")
            return
        for language, ident in list(CONTEXTS.defaults.items()):
            if ident == ctx.id:
                del CONTEXTS.defaults[language]
        ctx.close()
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        parts = self.path.strip("/").split("/")
        try:
            body = self.body()
            if parts == ["execute"]:
                self.execute(body)
            elif parts == ["contexts"]:
                cwd = body.get("cwd") or os.getcwd()
                self.answer(200, CONTEXTS.new(language_of(body.get("language")), str(cwd)).describe())
            elif len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                ctx = CONTEXTS.all.get(parts[1])
                if ctx is None:
                    self.answer(404, f"context {parts[1]} not found")
                    return
                ctx.restart()
                self.answer(204, "")
            else:
                self.answer(404, f"no route {self.path}")
        except ValueError as exc:
            self.answer(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - a kernel that does not start: said, not a dropped connection
            if not self.started:
                self.answer(503, f"{type(exc).__name__}: {exc}")

    started = False

    def execute(self, body: dict[str, Any]) -> None:
        code, ident, envs = body.get("code"), body.get("context_id"), body.get("env_vars") or {}
        if not isinstance(code, str):
            raise ValueError("code is a string")
        if ident and body.get("language"):
            raise ValueError("give context_id or language, not both")
        if not isinstance(envs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in envs.items()):
            raise ValueError("env_vars maps strings to strings")
        if ident:
            ctx = CONTEXTS.all.get(str(ident))
            if ctx is None:
                self.answer(404, f"context {ident} not found")
                return
        else:
            ctx = CONTEXTS.default(language_of(body.get("language")))
        self.started = True
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Connection", "close")
        self.end_headers()

        def emit(line: dict[str, Any]) -> None:
            self.wfile.write(json.dumps(line).encode() + b"\n")
            self.wfile.flush()

        with contextlib.suppress(GoneError):
            ctx.execute(code, envs, emit)
        self.close_connection = True


def main() -> None:
    importlib.import_module("jupyter_client.manager")  # no ipykernel: fail before listening, saying so
    importlib.import_module("ipykernel")
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    server.daemon_threads = True
    threading.Thread(target=CONTEXTS.default, args=("python",), daemon=True).start()  # warm: the first call is quicker
    server.serve_forever()


if __name__ in ("__main__", "hutch-code-interpreter"):
    main()
