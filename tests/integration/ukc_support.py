"""The Unikraft Cloud test server as a subprocess, and OpenAPI validation of its request log."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# the published files, kept unedited next to the repository (see their SOURCE.md)
# Unedited copies of the published files (see their SOURCE.md); HUTCH_UKC_SPECS points elsewhere.
SPECS = Path(os.environ.get("HUTCH_UKC_SPECS") or Path(__file__).resolve().parents[1] / "specs" / "unikraft-cloud")
TOKEN = "tok-" + "a1b2c3d4e5f6"
ACCOUNT = "11111111-2222-3333-4444-555555555555"
OTHER_TOKEN = "tok-other-99887766"
OTHER_ACCOUNT = "99999999-8888-7777-6666-555555555555"
PLUGIN_PREFIX = re.compile(r"^/v1/instances/[^/]+/plugins/sandbox")


class TestServer:
    __test__ = False

    def __init__(self, backend: str = "local") -> None:
        self.home = Path(tempfile.mkdtemp(prefix="ukc-ts-"))
        args = [sys.executable, "-m", "hutch.testing.unikraft", "--home", str(self.home), "--backend", backend]
        args += ["--token", f"{TOKEN}={ACCOUNT}", "--token", f"{OTHER_TOKEN}={OTHER_ACCOUNT}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(self.home / "ts.log", "wb"))  # noqa: SIM115
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("test server did not start: " + (self.home / "ts.log").read_text()[-2000:])
        hello = json.loads(line)
        self.url = hello["url"]
        self.ssh_address, self.ca_file = hello.get("ssh", ""), hello.get("ca_file", "")

    def _call(self, path: str, body: Any = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=60) as resp:
            return dict(json.loads(resp.read()))

    def state(self) -> dict[str, Any]:
        return self._call("/_test/state")

    def faults(self, **faults: Any) -> dict[str, Any]:
        return self._call("/_test/faults", faults)

    def reset_log(self) -> None:
        self._call("/_test/reset", {})

    def delete_behind_our_back(self, uuid: str) -> None:
        self._call("/_test/delete", {"uuid": uuid})

    def write_behind_our_back(self, uuid: str, path: str, data: str) -> None:
        """Write a file in an instance through its sandbox plugin, as another client of the account would."""
        body = json.dumps({"path": path, "data": data}).encode()
        headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        url = f"{self.url}/v1/instances/{uuid}/plugins/sandbox/fs/write"
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST", headers=headers), timeout=60) as resp:
            resp.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        from tests.conftest import sweep

        sweep(self.home)
        subprocess.run(["rm", "-rf", str(self.home)], check=False)


# -- OpenAPI validation ----------------------------------------------------------------------


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0 ``nullable`` as JSON Schema."""
    if isinstance(node, list):
        return [_nullable(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@cache
def spec(name: str) -> dict[str, Any]:
    return dict(_nullable(yaml.safe_load((SPECS / name).read_text())))


def _operation(doc: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    for template, ops in doc["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            return dict(ops[method.lower()])
    return None


def _schema(op: dict[str, Any], where: str) -> dict[str, Any] | None:
    node = op.get("requestBody") if where == "request" else op.get("responses", {}).get("default")
    content = (node or {}).get("content", {})
    return content.get("application/json", {}).get("schema")


def _check(doc: dict[str, Any], schema: dict[str, Any], value: Any, what: str) -> None:
    root = {"components": doc["components"]} | schema
    try:
        jsonschema.Draft4Validator(root).validate(value)
    except jsonschema.ValidationError as exc:
        raise AssertionError(f"{what} does not match the spec: {exc.message} at {list(exc.absolute_path)}") from None


ERROR_ENVELOPE = {
    "type": "object",
    "required": ["status"],
    "properties": {
        "status": {"$ref": "#/components/schemas/ResponseStatus"},
        "message": {"type": "string"},
        "errors": {"type": "array", "items": {"$ref": "#/components/schemas/ResponseError"}},
        "op_time_us": {"type": "integer"},
    },
}


def validate_log(log: list[dict[str, Any]]) -> int:
    """Every request hutch sent and every JSON answer it got, against the published files.

    Platform routes: platform.yaml. Plugin routes: the request against both sandbox.yaml
    (the metro view) and plugins/sandbox.yaml (the plugin's own API, newer), the answer
    against plugins/sandbox.yaml (the two files disagree on empty answers' ``data``:
    ``{}`` versus ``null``; the plugin file is the newer one). Returns how many were checked.
    """
    checked = 0
    for e in log:
        method, path = e["method"], e["path"]
        if e.get("response", {}).get("status") in (301, 302, 303, 307, 308):
            continue
        if PLUGIN_PREFIX.match(path):
            docs = [("sandbox.yaml", path), ("plugins/sandbox.yaml", PLUGIN_PREFIX.sub("", path))]
            answer_doc = docs[1]
        else:
            docs = [("platform.yaml", path)]
            answer_doc = docs[0]
        for name, p in docs:
            op = _operation(spec(name), method, p)
            assert op is not None, f"{method} {p} is not in {name}"
            schema = _schema(op, "request")
            if e["body"] is not None:
                assert schema is not None, f"{method} {p} sent a body that {name} does not describe"
                _check(spec(name), schema, e["body"], f"request {method} {p} ({name})")
            elif (op.get("requestBody") or {}).get("required") and method != "GET":
                # GET /v1/instances declares a required body (a NameOrUUID filter). hutch sends
                # none on purpose: a complete listing must not depend on how a server reads an
                # empty filter, since absence proofs rely on it. GETs are exempt; nothing else is.
                raise AssertionError(f"{method} {p} needs a body per {name}")
        body = e.get("response", {}).get("body")
        status = e.get("response", {}).get("status") or 0
        if body is not None and status >= 400:  # a failure: the common envelope
            name, _ = answer_doc
            _check(spec(name), ERROR_ENVELOPE, body, f"error answer to {method} {path} ({name})")
        elif body is not None:
            name, p = answer_doc
            schema = _schema(_operation(spec(name), method, p) or {}, "response")
            assert schema is not None, f"no response schema for {method} {p}"
            _check(spec(name), schema, body, f"response to {method} {p} ({name})")
        checked += 1
    return checked


@contextlib.contextmanager
def server(backend: str = "local") -> Any:
    ts = TestServer(backend)
    try:
        yield ts
    finally:
        ts.stop()
