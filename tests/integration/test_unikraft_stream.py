"""The unikraft provider's exec path loses nothing silently: a streamed run passes on all
of its output (not only what the result keeps), and a result or stored copy cut at the
cap says so."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest
from tests.conftest import Daemon
from tests.integration.test_unikraft import env, hutch, js, ukc, ukd  # noqa: F401 - fixtures
from tests.integration.ukc_support import SPECS, TestServer

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not SPECS.is_dir(), reason=f"no specs at {SPECS}")]


def test_a_streamed_unikraft_run_delivers_all_its_output(ukd: Daemon, ukc: TestServer) -> None:  # noqa: F811
    js(hutch(ukd.home, ukc, "create", "--provider", "unikraft", "--name", "us", "--json"))
    size = 3 << 20  # three times the default result cap
    with ukd.client() as c:
        got = bytearray()
        last = None
        for ev in c.exec_stream("us", {"command": ["head", "-c", str(size), "/dev/zero"]}):
            if ev["type"] == "stdout":
                got += base64.b64decode(ev["data"]) if ev["base64"] else ev["data"].encode()
            last = ev
        assert last is not None and last["type"] == "exit", last
        assert (len(got), last["stdout_bytes"], last["truncated"]) == (size, size, False)

        buffered = c.exec("us", {"command": ["head", "-c", str(size), "/dev/zero"]})
        assert buffered["truncated"] and buffered["stored_truncated"]  # the stored copy is the result's
        assert c.wait(buffered["run_id"])["truncated"]
    cli = hutch(ukd.home, ukc, "exec", "--json", "us", "--", "head", "-c", str(size), "/dev/zero")
    assert cli.returncode == 125 and "output truncated" in cli.stderr
    # no live input there: a piped stdin goes whole with the request instead of being dropped
    piped = subprocess.run(
        [sys.executable, "-m", "hutch", "exec", "us", "--", "wc", "-c"],
        input=b"12345",
        env=env(ukd.home, ukc),
        capture_output=True,
        timeout=180,
    )
    assert (piped.returncode, piped.stdout.strip()) == (0, b"5"), piped.stderr
