"""The bearer token of a daemon's TCP listener: read from a file, checked, and when it may
travel over plain http (to loopback only).

Shared by the client (``HUTCH_TOKEN_FILE``) and the server (``hutch serve --token-file``),
so it lives below both. Errors name the file, never its content.
"""

from __future__ import annotations

import os

from hutch.errors import InvalidError

TOKEN_RECIPE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > token && chmod 600 token"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str, what: str) -> str:
    """A bearer token from a file (one line); errors name the file, never its content."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidError(f"cannot read the {what} file {path}: {reason}", hint="point it at a readable file") from None
    check_token(token, f"the {what} file {path}")
    return token


def check_token(token: str, where: str) -> None:
    if not token:
        raise InvalidError(
            f"{where} is empty", hint="generate one: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if not all(33 <= ord(c) < 127 for c in token):
        raise InvalidError(f"{where} holds a token with spaces or non-ASCII characters", hint="use printable ASCII only")
