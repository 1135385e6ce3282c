"""The Unikraft Cloud OpenAPI files under tests/specs are the published ones, unedited."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

SPECS = Path(__file__).resolve().parents[1] / "specs" / "unikraft-cloud"


def test_copies_match_the_checksums_recorded_with_them() -> None:
    source = (SPECS / "SOURCE.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `[^`]+` \| `[0-9a-f]{40}` \|.*\| `([0-9a-f]{64})` \|$", source, re.M)
    assert {name for name, _ in rows} == {"platform.yaml", "plugins/sandbox.yaml", "sandbox.yaml"}
    for name, digest in rows:
        assert hashlib.sha256((SPECS / name).read_bytes()).hexdigest() == digest, name
    assert "BSD 3-Clause License" in source  # the license travels with the copies
