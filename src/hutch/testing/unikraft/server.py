"""A Unikraft Cloud stand-in built from the published OpenAPI files, for tests and development.

It serves the platform endpoints hutch uses (``/v1/users/quotas``, ``/v1/instances`` create,
list, get and delete) and the sandbox plugin routes
(``/v1/instances/{instance}/plugins/sandbox/...``: commands, logs, stdin, signal, wait, fs)
with the spec's response envelopes. Its instances are real local hutch sandboxes (an
in-process Service with the ``local`` provider, or ``fake`` with ``--backend fake``), so
commands really execute.

Fault injection (``POST /_test/faults`` with a JSON object; ``GET /_test/state`` shows the
instances, counters and the request log):

- ``drop_create``: N creates are carried out and then the connection is closed unanswered
- ``create_500``: N creates are carried out and answered 500 (an ambiguous answer)
- ``fail_5xx``: N requests (any route) are answered 503 without doing anything
- ``slow``: seconds to wait before every answer; ``slow_create``: before a create's answer
  (after the instance is made)
- ``double_create``: N creates make two instances of the same name and go unanswered
- ``standby``: new instances start in standby; a plugin request wakes one, answering 503
  for ``wake_seconds`` first
- ``plugin_never_ready``: plugin routes always answer 503
- ``duplicate_names``: names need not be unique (the real platform refuses duplicates)
- ``partial_delete``: N batch deletes answer HTTP 200 with an error status on the item
- ``redirect``: the next request (after ``redirect_after`` more) is answered with
  ``{"status": 307|302, "location": ...}``
- ``quota_instances``: the hard limit on instances

Instances created with a ``tls`` service on port 2222 are reachable over TLS-wrapped SSH
(:mod:`hutch.testing.unikraft.sshserver`): the start line names its address (``ssh``) and
the CA to trust (``ca_file``).

Start it with ``python -m hutch.testing.unikraft --token TOKEN[=ACCOUNT]``;
it prints one JSON line with its URL. It binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import re
import shlex
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hutch.testing.unikraft.testbed import IMAGES, Backend, Command, Instance, State, envelope

PLUGIN = re.compile(r"^/v1/instances/([^/]+)/plugins/([^/]+)(/.*)$")


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    # -- plumbing ------------------------------------------------------------------------

    def _body(self) -> Any:
        size = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(size) if size else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return {"__invalid_json__": raw[:100].decode(errors="replace")}

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        self.entry["response"] = {"status": code, "body": body}
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def _drop(self) -> None:
        self.entry["response"] = {"status": None, "dropped": True}
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(2)

    def _dispatch(self, method: str) -> None:
        st = self.server.state
        path, _, query = self.path.partition("?")
        body = self._body()
        self.entry: dict[str, Any] = {"method": method, "path": path, "query": query, "body": body, "time": time.time()}
        with st.lock:
            st.log.append(self.entry)
        if path.startswith("/_test/"):
            return self._control(method, path, body)
        slow = float(st.faults.get("slow") or 0)
        if slow:
            time.sleep(slow)
        redirect = st.faults.get("redirect")
        if redirect and st.take("redirect_after"):
            redirect = None  # let this request through; redirect a later one
        if redirect:
            with st.lock:
                st.faults["redirect"] = None
            return self._send(int(redirect.get("status", 307)), None, {"location": str(redirect["location"])})
        token = self.headers.get("authorization", "").removeprefix("Bearer ").strip()
        account = st.tokens.get(token)
        if account is None:
            return self._send(401, envelope(None, "error", "invalid or missing token", 401))
        if st.take("fail_5xx"):
            return self._send(503, envelope(None, "error", "service temporarily unavailable", 503))
        m = PLUGIN.match(path)
        if m:
            return self._plugin(method, m.group(1), m.group(2), m.group(3), body, account)
        return self._platform(method, path, query, body, account)

    def _guarded(self, method: str) -> None:
        try:
            self._dispatch(method)
        except Exception as exc:  # noqa: BLE001 - the platform answers 500, it does not hang up
            self._send(500, envelope(None, "error", f"internal error: {exc}", 500))

    def do_GET(self) -> None:
        self._guarded("GET")

    def do_POST(self) -> None:
        self._guarded("POST")

    def do_DELETE(self) -> None:
        self._guarded("DELETE")

    def do_PUT(self) -> None:
        self._guarded("PUT")

    def _control(self, method: str, path: str, body: Any) -> None:
        st = self.server.state
        with st.lock:
            if path == "/_test/faults" and method == "POST":
                st.faults.update(body or {})
            elif path == "/_test/reset" and method == "POST":
                st.log.clear()
            elif path == "/_test/delete" and method == "POST":  # the provider deletes on its own
                inst = st.instances.pop(str((body or {}).get("uuid")), None)
                if inst and inst.sandbox_id and st.backend:
                    st.backend.destroy(inst.sandbox_id)
            view = {
                "instances": [i.view() | {"account": i.account} for i in st.instances.values()],
                "creates": st.creates,
                "deletes": st.deletes,
                "faults": st.faults,
                "log": [e for e in st.log if not e["path"].startswith("/_test/")],
            }
        self._send(200, view)

    # -- platform --------------------------------------------------------------------------

    def _platform(self, method: str, path: str, query: str, body: Any, account: str) -> None:
        st = self.server.state
        if path == "/v1/users/quotas" and method == "GET":
            with st.lock:
                used = sum(1 for i in st.instances.values() if i.account == account)
            hard = st.quota()
            quota = {"uuid": account, "used": {"instances": used, "live_instances": used}, "hard": {"instances": hard}}
            quota["limits"] = {"min_memory_mb": 16, "max_memory_mb": 4096}
            return self._send(200, envelope({"quotas": [quota]}))
        if path == "/v1/instances" and method == "POST":
            return self._create(body if isinstance(body, dict) else {}, account)
        if path == "/v1/instances" and method == "GET":
            with st.lock:
                items = [i.view() for i in st.instances.values() if i.account == account]
            return self._send(200, envelope({"instances": items}))
        if path == "/v1/instances" and method == "DELETE":
            return self._delete(body if isinstance(body, list) else [], account)
        m = re.match(r"^/v1/instances/([^/]+)$", path)
        if m and method == "GET":
            inst = st.by_ref(m.group(1), account)
            if inst is None:
                return self._send(404, envelope(None, "error", f"instance {m.group(1)} not found", 404))
            return self._send(200, envelope({"instances": [inst.view() | {"status": "success"}]}))
        self._send(404, envelope(None, "error", f"no route {method} {path}", 404))

    def _create(self, body: dict[str, Any], account: str) -> None:
        st = self.server.state
        name = str(body.get("name") or f"instance-{uuidlib.uuid4().hex[:8]}")
        image = str(body.get("image") or "")
        if image not in IMAGES:
            return self._send(400, envelope(None, "error", f"image {image!r} not found", 400))
        with st.lock:
            mine = [i for i in st.instances.values() if i.account == account]
            if len(mine) >= st.quota():
                return self._send(429, envelope(None, "error", "instance quota exceeded", 429))
            if not st.faults.get("duplicate_names") and any(i.name == name for i in mine):
                return self._send(409, envelope(None, "error", f"an instance named {name!r} already exists", 409))
            st.creates += 1
        sandbox_id = st.backend.create(int(body.get("memory_mb") or 128)) if st.backend else None
        inst = Instance(name, body, account, sandbox_id)
        if st.faults.get("standby"):
            inst.state = "standby"
        with st.lock:
            st.instances[inst.uuid] = inst
        if st.take("double_create"):  # a platform bug: the same create made two instances
            twin = Instance(name, body, account, st.backend.create(128) if st.backend else None)
            with st.lock:
                st.instances[twin.uuid] = twin
                st.creates += 1
            return self._drop()
        if st.faults.get("slow_create"):
            time.sleep(float(st.faults["slow_create"]))
        if st.take("drop_create"):
            return self._drop()
        if st.take("create_500"):
            return self._send(500, envelope(None, "error", "internal error", 500))
        item: dict[str, Any] = {"uuid": inst.uuid, "name": inst.name, "state": inst.state, "status": "success"}
        if body.get("service_group"):
            item["service_group"] = inst.service_group()
        self._send(200, envelope({"instances": [item]}))

    def _delete(self, items: list[Any], account: str) -> None:
        st = self.server.state
        out: list[dict[str, Any]] = []
        partial = st.take("partial_delete")
        for item in items:
            ref = str(item.get("uuid") or item.get("name") or "") if isinstance(item, dict) else ""
            inst = st.by_ref(ref, account)
            if inst is None:
                out.append({"uuid": ref, "status": "error", "message": "instance not found", "error": 404})
            elif partial:
                out.append({"uuid": inst.uuid, "name": inst.name, "status": "error", "message": "delete failed", "error": 500})
            else:
                with st.lock:
                    st.instances.pop(inst.uuid, None)
                    st.deletes += 1
                if inst.sandbox_id and st.backend:
                    st.backend.destroy(inst.sandbox_id)
                out.append({"uuid": inst.uuid, "name": inst.name, "status": "success", "previous_state": inst.state})
        ok = all(o["status"] == "success" for o in out)
        self._send(200, envelope({"instances": out}, "success" if ok else "error"))

    # -- the sandbox plugin ----------------------------------------------------------------

    def _plugin(self, method: str, ref: str, plugin: str, sub: str, body: Any, account: str) -> None:
        st = self.server.state
        inst = st.by_ref(ref, account)
        if inst is None:
            return self._send(404, envelope(None, "error", f"instance {ref} not found", 404))
        if plugin != "sandbox" or not inst.plugin:
            return self._send(404, envelope(None, "error", f"plugin {plugin!r} is not attached", 404))
        if st.faults.get("plugin_never_ready"):
            return self._send(503, envelope(None, "error", "plugin not ready", 503))
        now = time.monotonic()
        with st.lock:
            if inst.state == "standby":
                inst.state, inst.wake_until = "starting", now + float(st.faults.get("wake_seconds") or 0.3)
            if inst.state == "starting":
                if now < inst.wake_until:
                    return self._send(503, envelope(None, "error", "instance is waking up", 503))
                inst.state = "running"
        body = body if isinstance(body, dict) else {}
        if sub == "/commands" and method == "GET":
            return self._send(200, envelope({"commands": list(inst.commands)}))
        if sub == "/commands" and method == "POST":
            if not isinstance(body.get("cmd"), str):
                return self._send(400, envelope(None, "error", "cmd is required", 400))
            # commands see the instance's environment, then their own
            env = dict(inst.body.get("env") or {}) | dict(body.get("env") or {})
            cmd = Command(body["cmd"], body.get("cwd"), body.get("env"))
            cmd.run_env = env
            inst.commands[cmd.uuid] = cmd
            assert st.backend is not None
            st.backend.start(inst, cmd)
            return self._send(200, envelope({"uuid": cmd.uuid}))
        if sub.startswith("/fs/"):
            return self._fs(inst, sub, body)
        m = re.match(r"^/commands/([^/]+)(/.*)?$", sub)
        found = inst.commands.get(m.group(1)) if m else None
        if m is None or found is None:
            return self._send(404, None)
        cmd = found
        rest = m.group(2) or ""
        if rest == "" and method == "GET":
            data = {"uuid": cmd.uuid, "cmdline": cmd.cmdline, "cwd": cmd.cwd, "env": cmd.env, "exitcode": cmd.exitcode}
            return self._send(200, envelope(data))
        if rest == "/logs" and method == "GET":
            if cmd.logs_deleted:
                return self._send(410, None)
            data = {}
            for name in ("stdout", "stderr"):
                rng = body.get(name) or {}
                buf = bytes(cmd.out[name])
                start = int(rng.get("offset") or 0)
                end = len(buf) if rng.get("limit") is None else start + int(rng["limit"])
                data[name] = base64.b64encode(buf[start:end]).decode()
                data[name + "_available"] = len(buf)
            return self._send(200, envelope(data))
        if rest in ("/wait", "/wait_timeout") and method == "POST":
            timeout = float(body.get("timeout_s", 0)) if rest == "/wait_timeout" else None
            if not cmd.done.wait(timeout):
                return self._send(408, envelope(None, "error", "command still running", 408))
            return self._send(200, envelope(None, null=True))
        if rest == "/stdin" and method == "POST":
            try:
                fed = base64.b64decode(str(body.get("data", "")), validate=True)
            except ValueError:
                return self._send(400, envelope(None, "error", "data is not valid base64", 400))
            assert st.backend is not None
            st.backend.loop.call_soon_threadsafe(cmd.inbox.put_nowait, {"stdin": fed})
            if body.get("eof"):
                st.backend.loop.call_soon_threadsafe(cmd.inbox.put_nowait, {"eof": True})
            return self._send(200, envelope(None, null=True))
        if rest == "/signal" and method == "POST":
            import signal as signals

            value = body.get("signal")
            try:
                sig = int(value) if str(value).isdigit() else int(signals.Signals["SIG" + str(value).upper().removeprefix("SIG")])
            except (KeyError, ValueError):
                return self._send(400, envelope(None, "error", f"unknown signal {value!r}", 400))
            if cmd.exitcode is None and st.backend is not None:
                st.backend.signal(inst, cmd, sig)
            return self._send(200, envelope(None, null=True))
        return self._send(404, None)

    def _fs(self, inst: Instance, sub: str, body: dict[str, Any]) -> None:
        backend = self.server.state.backend
        assert backend is not None
        path = str(body.get("path") or "")
        try:
            if sub == "/fs/read":
                return self._send(200, envelope({"contents": base64.b64encode(backend.read(inst, path)).decode()}))
            if sub == "/fs/write":
                raw = base64.b64decode(body["data"]) if body.get("encoding") == "base64" else str(body["data"]).encode()
                if body.get("append"):
                    with contextlib.suppress(Exception):
                        raw = backend.read(inst, path) + raw
                backend.write(inst, path, raw)
                return self._send(200, envelope(None, null=True))
            if sub == "/fs/mkdir":
                cmd = Command(f"mkdir {'-p ' if body.get('parents') else ''}{shlex.quote(path)}", None, None)
                backend.start(inst, cmd)
                cmd.done.wait(30)
                if cmd.exitcode != 0:
                    return self._send(500, envelope(None, "error", bytes(cmd.out["stderr"]).decode(errors="replace"), 500))
                return self._send(200, envelope(None, null=True))
        except Exception as exc:  # noqa: BLE001 - the plugin answers 500 for any fs failure
            return self._send(500, envelope(None, "error", f"{path}: {exc}", 500))
        self._send(404, None)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: State, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.state = state

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a timeout test, a dropped create) is no news."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def serve(tokens: dict[str, str], backend: str = "local", home: Path | None = None, port: int = 0) -> Server:
    """Start in a thread; ``server.shutdown()`` then ``server.state.backend.close()`` to stop."""
    home = home or Path(tempfile.mkdtemp(prefix="ukc-testserver-"))
    server = Server(State(tokens, Backend(backend, home) if backend != "none" else None), port)
    if server.state.backend is not None:
        with contextlib.suppress(ImportError):  # asyncssh is optional: no ssh front without it
            from hutch.testing.unikraft.sshserver import SSHFront

            server.state.ssh = SSHFront(server.state, home)
    threading.Thread(target=server.serve_forever, name="ukc-testserver", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hutch.testing.unikraft", description=__doc__.split("\n")[0])
    parser.add_argument("--token", action="append", default=[], help="TOKEN or TOKEN=ACCOUNT_UUID (repeatable)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--home", help="state directory for the backing sandboxes (default: a temp dir)")
    parser.add_argument("--backend", choices=("local", "fake"), default="local")
    args = parser.parse_args(argv)
    tokens = {}
    for item in args.token or ["dev-token"]:
        token, _, account = item.partition("=")
        tokens[token] = account or str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, token))
    import signal

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    server = serve(tokens, args.backend, Path(args.home) if args.home else None, args.port)
    hello: dict[str, Any] = {"url": server.url, "accounts": sorted(set(tokens.values()))}
    if server.state.ssh is not None:  # HUTCH_UNIKRAFT_SSH_CONNECT and HUTCH_UNIKRAFT_CA_FILE for hutch ssh
        hello |= {"ssh": f"127.0.0.1:{server.state.ssh.port}", "ca_file": str(server.state.ssh.ca_file)}
    print(json.dumps(hello), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        if server.state.ssh is not None:
            server.state.ssh.close()
        if server.state.backend:
            server.state.backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
