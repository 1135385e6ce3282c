"""Redirects of an app behind the gateway's path route stay under ``/p/SANDBOX/PORT/``."""

from __future__ import annotations

import pytest

from hutch.server.proxy import relocate

P = "/p/sbx_1/8000/"


@pytest.mark.parametrize(
    ("location", "host", "expected"),
    [
        ("/login?next=/a", None, "/p/sbx_1/8000/login?next=/a"),
        ("/", None, "/p/sbx_1/8000/"),
        ("/p/sbx_1/8000/already", None, "/p/sbx_1/8000/already"),  # an app that knows its prefix
        ("http://127.0.0.1:8000/abs#top", None, "/p/sbx_1/8000/abs#top"),
        ("http://localhost:3000", None, "/p/sbx_1/8000/"),
        ("https://gw.example.com:8443/x?y=1", "gw.example.com:8443", "/p/sbx_1/8000/x?y=1"),  # the Host it was sent
        ("https://example.com/x", "gw.example.com:8443", "https://example.com/x"),  # elsewhere: left alone
        ("//example.com/x", None, "//example.com/x"),
        ("relative/path", None, "relative/path"),  # relative to the prefixed URL already
        ("http://[::1", None, "http://[::1"),  # not a URL: left alone
    ],
)
def test_locations_under_the_prefix(location: str, host: str | None, expected: str) -> None:
    given = host.encode() if host is not None else None
    assert relocate(location.encode(), P, given).decode() == expected


def test_no_prefix_no_change() -> None:
    assert relocate(b"/login", "/", None) == b"/login"
