"""What the CLI's plain paths do without the standard library's heavier modules gives what
those modules give: the state directory (platformdirs), absolute paths (pathlib), sizes (the
regular expression), URL segments and queries (urllib.parse)."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from urllib.parse import quote as url_quote
from urllib.parse import urlencode

import pytest
from platformdirs import user_state_dir

from hutch import config, units
from hutch.client import paths
from hutch.client.transport import query
from hutch.config import Settings
from hutch.errors import InvalidError


@pytest.mark.parametrize("home", ["/home/someone", "/home/someone/", "/", "relative", None])
@pytest.mark.parametrize("state", [None, "", "   ", "/srv/state", "relative/state", "/with space/x/"])
def test_a_users_default_home_is_platformdirs_state_directory(
    monkeypatch: pytest.MonkeyPatch, state: str | None, home: str | None
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    if home is None:
        monkeypatch.delenv("HOME", raising=False)
    else:
        monkeypatch.setenv("HOME", home)
    if state is None:
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_STATE_HOME", state)
    assert config.default_home_dir() == user_state_dir("hutch", appauthor=False)
    assert config.default_home() == Path(user_state_dir("hutch", appauthor=False))


def test_roots_default_home() -> None:
    if os.geteuid() != 0:
        pytest.skip("a check of root's default; the user's is checked above")
    assert config.default_home_dir() == "/var/lib/hutch"


@pytest.mark.parametrize("given", ["a", "./a/", "a/b/../c", "/x//y/./z/", "~", "~/q/r", "/", "//net/x", "///x", ".", "..", "é/ü"])
def test_an_absolute_home_is_what_pathlib_makes(given: str) -> None:
    assert config.absolute(given) == str(Path(given).expanduser().absolute())


def test_settings_keep_home_as_text_and_give_a_path(tmp_path: Path) -> None:
    s = Settings(home=tmp_path / "h")
    assert s.home_dir == str(tmp_path / "h")
    assert s.home == tmp_path / "h" and isinstance(s.home, Path)
    assert s.socket_file == str(s.socket_path) == str(tmp_path / "h" / "hutchd.sock")
    s.home = "/elsewhere"
    assert s.home == Path("/elsewhere")
    copy = s.replace(pids=7)
    assert copy.home == Path("/elsewhere") and copy.pids == 7 and copy != s and copy.replace(pids=s.pids) == s
    assert "home=PosixPath('/elsewhere')" in repr(s)


def test_loaded_settings_resolve_home_and_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HUTCH_HOME", "rel//home/")
    (tmp_path / "rel" / "home").mkdir(parents=True)
    (tmp_path / "rel" / "home" / "config.toml").write_text('pids = 77\nmemory = "2G"\n')
    s = Settings.load()
    assert s.home == tmp_path / "rel" / "home"
    assert (s.pids, s.memory, s.sources["pids"]) == (77, "2G", "file")
    assert s.config_path == os.path.join("rel//home/", "config.toml")


SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)


def _size_by_pattern(text: str) -> int | None:
    """What parse_size gave with its pattern alone (None: invalid)."""
    m = SIZE_RE.fullmatch(text)
    if not m:
        return None
    try:
        size = int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()])
    except OverflowError:
        return None
    return size if size > 0 else None


def test_sizes_read_without_the_pattern_are_what_the_pattern_reads() -> None:
    rng = random.Random(11)
    samples = ["512M", "1G", "1g", "64m", "65536", "0", "0M", "00012K", "999999999999999", "999999999999999T"]
    samples += ["1234567890123456", "1.5G", " 1G", "1G ", "1GiB", "1gb", "M", "", "-1", "1MM", "\uff11\uff12", "1\u0661", "2t"]
    for _ in range(2000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 18)))
        samples.append(digits + rng.choice(["", "k", "K", "m", "M", "g", "G", "t", "T", "x", "kb", "iB", " "]))
    for text in samples:
        expected = _size_by_pattern(text)
        if expected is None:
            with pytest.raises(InvalidError):
                units.parse_size(text)
        else:
            assert units.parse_size(text) == expected, text


def test_path_segments_are_quoted_as_urllib_quotes_them() -> None:
    rng = random.Random(5)
    alphabet = "abcXYZ019_.-~ /%?#&=+:@é\u2028\x00"
    for text in [
        "sbx_0123abcd",
        "my-box",
        "a b",
        "a/b",
        "",
        "~x",
        "ü",
        "%41",
        *("".join(rng.choice(alphabet) for _ in range(rng.randrange(8))) for _ in range(500)),
    ]:
        assert paths.quote(text) == url_quote(text, safe=""), text
        assert paths.sandbox(text) == "/v1/sandboxes/" + url_quote(text, safe="")


@pytest.mark.parametrize(
    "params",
    [
        {"stream": True},
        {"stream": False, "limit": 5, "after": 0},
        {"all": True, "label": ["a=b", "c=d"], "state": None},
        {"since": 1.5, "type": "run_started"},
        {"path": "/work space/ü"},
        {"n": None},
    ],
)
def test_queries_are_what_urlencode_makes(params: dict[str, object]) -> None:
    clean = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
    assert query(params) == ("?" + urlencode(clean, doseq=True) if clean else "")
