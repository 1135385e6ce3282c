"""Smaller rough edges of the CLI: amounts of data carry their unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_cli import cli, daemon_home, sbx  # noqa: F401 - fixtures

from hutch.cli.common import human_bytes


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (53, "53 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 << 20, "5.0 MiB"),
        (3 << 30, "3.0 GiB"),
        (2048 << 40, "2048.0 TiB"),
    ],
)
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(n) == text


def test_push_and_pull_summaries_say_bytes(cli: Any, sbx: str, tmp_path: Path) -> None:  # noqa: F811
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("x" * 50)
    (src / "b.txt").write_text("yyy")
    code, out, err = cli("push", sbx, str(src))
    assert code == 0, err
    assert out.strip() == "sent 2 file(s), 53 bytes; deleted 0; unchanged 0"
    code, out, err = cli("pull", sbx, str(tmp_path / "back"))
    assert code == 0, err
    assert out.startswith("received 2 file(s), 53 bytes into ")
