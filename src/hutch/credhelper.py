"""Docker credential helpers: the login of a registry from ``docker-credential-NAME get``.

A docker config file may keep no secret itself and name a program that holds them instead:
``credHelpers`` (one per registry) or ``credsStore`` (for every registry). As docker does, the
caller's side runs ``docker-credential-NAME get`` (found on the caller's ``PATH``, in the
caller's environment), writes the registry's server address to its standard input and reads
``{"ServerURL", "Username", "Secret"}`` from its standard output; a ``Username`` of
``<token>`` makes ``Secret`` an identity token. A helper that says it has nothing for the
registry ("credentials not found") means an anonymous pull. Everything else is a clear error
that never quotes the helper's standard output (it holds the secret; at most the last line of
its standard error is told): a name that is not a plain name, a helper that is not installed,
one that fails, answers with something other than that JSON, writes more than MAX_OUTPUT or
takes longer than TIMEOUT (its whole process group is killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping

from hutch.errors import InvalidError, UnavailableError

TIMEOUT = 30.0
MAX_OUTPUT = 64 << 10
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NOT_FOUND = b"credentials not found"  # what docker's helpers print (exit 1) for a registry they hold nothing for


def _read_all(proc: subprocess.Popen[bytes], data: bytes, deadline: float) -> tuple[bytes, bytes] | None:
    """Feed ``data``, read stdout and stderr to their ends (each at most MAX_OUTPUT + 1 bytes); None on timeout."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as sel:
        for fd in out:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                buf = out[key.fd]
                if not chunk or len(buf) > MAX_OUTPUT:
                    sel.unregister(key.fd)
                    continue
                buf += chunk[: MAX_OUTPUT + 1 - len(buf)]
    return bytes(out[proc.stdout.fileno()]), bytes(out[proc.stderr.fileno()])


def get(environ: Mapping[str, str], name: str, server: str, where: str) -> tuple[str, str] | None:
    """``(username, secret)`` from ``docker-credential-NAME get`` for ``server``; None: it holds nothing for
    it. ``where`` names the config entry that named the helper, for the messages."""
    if not NAME_RE.fullmatch(name):
        raise InvalidError(
            f"the docker config file's {where} names the credential helper {name[:64]!r}, which is not a plain name",
            hint='a helper is named by what follows docker-credential- in its program\'s name, e.g. "pass"',
        )
    program_name = f"docker-credential-{name}"
    program = shutil.which(program_name, path=environ.get("PATH") or os.defpath)
    if program is None:
        raise InvalidError(
            f"the docker config file's {where} names {program_name}, which is not on PATH",
            hint=f"install {program_name}, or remove {where} from the docker config file "
            "(or set HUTCH_REGISTRY_USER and HUTCH_REGISTRY_PASSWORD)",
        )
    hint = f"check that `echo {server} | {program_name} get` works in this shell"
    try:
        proc = subprocess.Popen(
            [program, "get"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(environ),
            start_new_session=True,  # its whole group is killed on a timeout
        )
    except OSError as exc:
        raise UnavailableError(f"cannot run {program_name}: {exc.strerror or exc}", hint=hint) from None
    got: tuple[bytes, bytes] | None = None
    try:
        got = _read_all(proc, server.encode() + b"\n", time.monotonic() + TIMEOUT)
        if got is not None:
            proc.wait(timeout=5)  # its output ended: it is exiting
    except subprocess.TimeoutExpired:
        got = None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    if got is None:
        raise UnavailableError(f"{program_name} get did not answer for {server} within {TIMEOUT:.0f} s", hint=hint)
    out, err = got
    if proc.returncode != 0:
        if NOT_FOUND in out.lower() or NOT_FOUND in err.lower():
            return None
        why = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise UnavailableError(f"{program_name} get failed for {server}: {why[0][:200]}", hint=hint)
    if len(out) > MAX_OUTPUT:
        raise UnavailableError(f"{program_name} get wrote more than {MAX_OUTPUT >> 10} KiB for {server}", hint=hint)
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("Secret", ""), str) or not isinstance(doc.get("Username", ""), str):
        raise UnavailableError(
            f"{program_name} get did not answer with a JSON object of Username and Secret for {server}", hint=hint
        )
    username, secret = doc.get("Username") or "", doc.get("Secret") or ""
    return (username, secret) if secret else None
