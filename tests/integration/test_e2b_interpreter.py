"""``e2b-code-interpreter``'s ``Sandbox.run_code`` unchanged against a real gateway: its
default template ``code-interpreter-v1`` is the key's image of that name (a Debian root with
ipykernel, e2b_images.py), port 49999 is relayed into the sandbox where hutch starts its
server over real ipykernel kernels. An image without ipykernel says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import destroy_all, sweep
from tests.integration.e2b_images import interpreter_root
from tests.integration.e2b_sdk import sdk_python
from tests.integration.test_e2b import E2B
from tests.integration.test_remote import RemoteDaemon

from hutch.server.e2b.auth import hutch_id

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the Debian root keeps its owners: built as root"),
]

PNG_CELL = """
import struct, zlib
from IPython.display import Image, display
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
png += chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b'')
display(Image(data=png))
"""


@pytest.fixture(scope="module")
def e2b() -> Iterator[E2B]:
    python = sdk_python(interpreter=True)
    root = interpreter_root()
    home = Path(tempfile.mkdtemp(prefix="hutch-e2b-ci-"))
    d = RemoteDaemon(home, "--listen", "127.0.0.1:0").start()
    try:
        e = E2B(d, python)
        as_alice = d.env | {"HUTCH_HOST": d.url, "HUTCH_TOKEN": e.alice["key"]}
        r = subprocess.run(
            [sys.executable, "-m", "hutch", "image", "import", f"rootfs:{root}", "code-interpreter-v1", "--json"],
            env=as_alice,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        yield e
    finally:
        try:
            destroy_all(home)
        finally:
            d.stop()
            sweep(home)
            shutil.rmtree(home, ignore_errors=True)


def test_run_code_keeps_state_streams_results_and_errors(e2b: E2B) -> None:
    out = e2b.sdk(f"""
        import base64
        from e2b_code_interpreter import Sandbox
        sbx = Sandbox.create()
        out["id"] = sbx.sandbox_id
        seen, errs = [], []
        ex = sbx.run_code("print('hello'); x = 41", on_stdout=lambda m: seen.append(m.line))
        out["print"] = [ex.logs.stdout, seen, ex.error is None, ex.results == []]
        ex = sbx.run_code("x + 1")
        out["value"] = [ex.text, [r.is_main_result for r in ex.results]]
        ex = sbx.run_code("import sys; print('oops', file=sys.stderr); 1/0", on_stderr=lambda m: errs.append(m.line))
        out["error"] = [ex.error.name, ex.error.value, "ZeroDivisionError" in ex.error.traceback, ex.logs.stderr, errs]
        ex = sbx.run_code({PNG_CELL!r})
        png = ex.results[0].png
        out["png"] = [len(ex.results), base64.b64decode(png)[:8].hex() if png else None, ex.results[0].is_main_result]
        ex = sbx.run_code("import os; os.environ.get('FOO')", envs={{"FOO": "bar"}})
        out["envs"] = [ex.text, sbx.run_code("os.environ.get('FOO', 'unset')").text]
        ctx = sbx.create_code_context()
        ex = sbx.run_code("x", context=ctx)
        out["other_context"] = [ex.error.name if ex.error else None, sbx.run_code("y = 5; y * 2", context=ctx).text]
        out["kept"] = [sbx.run_code("x").text, sbx.run_code("y", context=ctx).text]
        out["contexts"] = sorted(c.id for c in sbx.list_code_contexts())
        out["ctx"] = ctx.id
        out["users"] = [sbx.commands.run("id -un").stdout, sbx.commands.run("id -un", user="nobody").stdout]
        sbx.remove_code_context(ctx)
        out["after_remove"] = [c.id for c in sbx.list_code_contexts()]
        from e2b import NotFoundException
        try:
            sbx.run_code("1", context=ctx)
        except NotFoundException as exc:
            out["gone"] = type(exc).__name__
        sbx.kill()
    """)
    assert out["print"] == [["hello\n"], ["hello\n"], True, True]
    assert out["value"] == ["42", [True]]
    assert out["error"][:3] == ["ZeroDivisionError", "division by zero", True]
    assert out["error"][3] == ["oops\n"] and out["error"][4] == ["oops\n"]
    assert out["png"] == [1, "89504e470d0a1a0a", False]  # a display, not the cell's value
    assert out["envs"] == ["'bar'", "'unset'"]  # envs hold for that one call
    assert out["other_context"] == ["NameError", "10"]
    assert out["kept"] == ["41", "5"]
    assert out["ctx"] in out["contexts"] and len(out["contexts"]) == 2
    assert out["after_remove"] == [c for c in out["contexts"] if c != out["ctx"]]
    assert out["gone"] == "NotFoundException"
    assert out["users"] == ["root\n", "nobody\n"]  # a root sandbox runs user= as that user (exec --user)
    # the hutch side: alice's sandbox from her image, the server one tagged run of it
    owner = e2b.owner()
    rec = owner.get(hutch_id(out["id"]))
    assert rec["owner"] == e2b.alice["id"] and rec["spec"]["image"] == "code-interpreter-v1"
    commands = [r["command"][:2] for r in owner.runs(rec["id"])]
    assert ["python3", "-c"] in commands
    assert "run_started" in e2b.events(out["id"])


def test_run_code_in_an_image_without_ipykernel_says_why(e2b: E2B) -> None:
    out = e2b.sdk("""
        from e2b_code_interpreter import Sandbox
        sbx = Sandbox.create(template="base")  # the host's /usr: python3 without ipykernel
        try:
            sbx.run_code("1")
        except Exception as exc:
            out["error"] = [type(exc).__name__, str(exc)]
        out["alive"] = sbx.commands.run("echo still").stdout
        sbx.kill()
    """)
    name, message = out["error"]
    assert name == "SandboxException" and "503" in message, message
    assert "ipykernel" in message and "jupyter_client" in message, message
    assert out["alive"] == "still\n"


def test_a_wrong_traffic_token_opens_no_port(e2b: E2B) -> None:
    out = e2b.sdk("""
        import httpx
        from e2b_code_interpreter import Sandbox
        sbx = Sandbox.create()
        url = sbx._jupyter_url + "/contexts"
        status = lambda headers: httpx.get(url, headers=headers, timeout=300).status_code  # the first starts the server
        base = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49999"}
        out["none"] = status(base)
        out["wrong"] = status(base | {"E2B-Traffic-Access-Token": "et_" + "0" * 48})
        out["right"] = status(base | {"E2B-Traffic-Access-Token": sbx.traffic_access_token})
        own = base | {"X-Access-Token": sbx._envd_access_token}
        out["bad_port"] = status(own | {"E2b-Sandbox-Port": "0"})
        out["closed"] = status(own | {"E2b-Sandbox-Port": "8123"})
        sbx.kill()
    """)
    assert out == {"none": 401, "wrong": 401, "right": 200, "bad_port": 400, "closed": 503}
