"""Settings: flag > environment (HUTCH_*) > config file > default."""

from __future__ import annotations

from pathlib import Path

import pytest

from hutch.config import Settings
from hutch.errors import InvalidError

# field -> (file value, env value, flag value, default, attribute value for each)
FIELDS = {
    "provider": ('"from-file"', "from-env", "from-flag", "local"),
    "memory": ('"3G"', "2G", "1536M", "1G"),
    "pids": ("30", "20", 10, 512),
    "exec_timeout": ("30.5", "20.5", 10.5, 3600.0),
    "output_cap": ("3000", "2000", 1000, 1 << 20),
}


def _coerced(field: str, raw: object) -> object:
    kinds = {"pids": int, "output_cap": int, "exec_timeout": float}
    if field in kinds:
        return kinds[field](raw)
    return str(raw).strip('"')


@pytest.fixture
def env(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    clean_env.setenv("HUTCH_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return clean_env


def _write_config(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_precedence_flag_env_file_default(env: pytest.MonkeyPatch, tmp_path: Path, field: str) -> None:
    file_v, env_v, flag_v, default = FIELDS[field]
    home = tmp_path / "home"

    s = Settings.load()
    assert getattr(s, field) == default
    assert field not in s.sources

    _write_config(home / "config.toml", {field: file_v})
    s = Settings.load()
    assert getattr(s, field) == _coerced(field, file_v)
    assert s.sources[field] == "file"

    env.setenv("HUTCH_" + field.upper(), env_v)
    s = Settings.load()
    assert getattr(s, field) == _coerced(field, env_v)
    assert s.sources[field] == "env"

    s = Settings.load(**{field: flag_v})
    assert getattr(s, field) == _coerced(field, flag_v)
    assert s.sources[field] == "flag"


def test_all_layers_at_once(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_config(tmp_path / "home" / "config.toml", {"provider": '"fake"', "pids": "7", "memory": '"64M"', "cpus": "1.5"})
    env.setenv("HUTCH_PIDS", "8")
    env.setenv("HUTCH_MEMORY", "128M")
    s = Settings.load(memory="256M")
    assert (s.provider, s.pids, s.memory, s.cpus, s.exec_timeout) == ("fake", 8, "256M", 1.5, 3600.0)
    assert s.sources == {"home": "env", "provider": "file", "pids": "env", "memory": "flag", "cpus": "file"}


def test_none_flags_are_ignored(env: pytest.MonkeyPatch) -> None:
    env.setenv("HUTCH_PROVIDER", "fake")
    s = Settings.load(provider=None, pids=None, home=None)
    assert s.provider == "fake"
    assert s.pids == 512


def test_empty_env_is_ignored(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_config(tmp_path / "home" / "config.toml", {"pids": "9"})
    env.setenv("HUTCH_PIDS", "")
    env.setenv("HUTCH_CPUS", "")
    s = Settings.load()
    assert s.pids == 9
    assert s.cpus is None


def test_home_flag_beats_env(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    s = Settings.load(home=tmp_path / "flag-home")
    assert s.home == tmp_path / "flag-home"
    assert s.socket_path == tmp_path / "flag-home" / "hutchd.sock"
    assert s.db_path == tmp_path / "flag-home" / "hutch.db"
    assert Settings.load().home == tmp_path / "home"


def test_home_is_made_absolute(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.chdir(tmp_path)
    env.setenv("HUTCH_HOME", "relative/home")
    assert Settings.load().home == tmp_path / "relative" / "home"
    env.setenv("HOME", str(tmp_path / "user"))
    assert Settings.load(home="~/state").home == tmp_path / "user" / "state"


def test_config_file_follows_home(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    _write_config(other / "config.toml", {"provider": '"fake"'})
    assert Settings.load().provider == "local"
    assert Settings.load(home=other).provider == "fake"


def test_hutch_config_points_elsewhere(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_config(tmp_path / "home" / "config.toml", {"pids": "1"})
    cfg = _write_config(tmp_path / "elsewhere.toml", {"pids": "2", "provider": '"fake"'})
    env.setenv("HUTCH_CONFIG", str(cfg))
    s = Settings.load()
    assert (s.pids, s.provider) == (2, "fake")
    assert s.sources["pids"] == "file"
    env.setenv("HUTCH_PIDS", "3")
    assert Settings.load().pids == 3


def test_unknown_config_keys_are_ignored(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_config(tmp_path / "home" / "config.toml", {"nonsense": "1", "pids": "5"})
    s = Settings.load()
    assert s.pids == 5
    assert not hasattr(s, "nonsense")


def test_bad_toml_is_invalid(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "home" / "config.toml"
    cfg.write_text("pids = = 3\n[unclosed\n")
    with pytest.raises(InvalidError) as info:
        Settings.load()
    assert str(cfg) in info.value.message
    assert info.value.hint


def test_bad_toml_via_hutch_config_is_invalid(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("this is not toml")
    env.setenv("HUTCH_CONFIG", str(cfg))
    with pytest.raises(InvalidError, match=r"bad\.toml"):
        Settings.load()


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("HUTCH_PIDS", "abc"),
        ("HUTCH_PIDS", "1.5"),
        ("HUTCH_OUTPUT_CAP", "lots"),
        ("HUTCH_UID_BASE", "x"),
        ("HUTCH_CPUS", "two"),
        ("HUTCH_EXEC_TIMEOUT", "soon"),
        ("HUTCH_DAEMON_START_TIMEOUT", "later"),
    ],
)
def test_bad_number_in_env_is_invalid(env: pytest.MonkeyPatch, var: str, value: str) -> None:
    env.setenv(var, value)
    with pytest.raises(InvalidError) as info:
        Settings.load()
    assert info.value.kind == "invalid"
    assert "HUTCH_" in (info.value.hint or "")


def test_bad_number_in_file_is_invalid(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_config(tmp_path / "home" / "config.toml", {"pids": '"many"'})
    with pytest.raises(InvalidError):
        Settings.load()


def test_numbers_from_env_are_coerced(env: pytest.MonkeyPatch) -> None:
    env.setenv("HUTCH_PIDS", "64")
    env.setenv("HUTCH_CPUS", "0.5")
    env.setenv("HUTCH_DAEMON_START_TIMEOUT", "3")
    s = Settings.load()
    assert s.pids == 64 and isinstance(s.pids, int)
    assert s.cpus == 0.5 and isinstance(s.cpus, float)
    assert s.daemon_start_timeout == 3.0 and isinstance(s.daemon_start_timeout, float)


def test_profile_sits_between_env_and_file(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "home" / "config.toml").write_text(
        'memory = "3G"\npids = 30\nhost = "unix:///file.sock"\n'
        '[profiles.lab]\nmemory = "2G"\npids = 20\nhost = "https://lab.example:8765"\ntoken_file = "/t"\n'
        "[profiles.empty]\n"
    )
    s = Settings.load(profile="lab")
    assert (s.memory, s.pids, s.host, s.token_file, s.profile) == ("2G", 20, "https://lab.example:8765", "/t", "lab")
    assert s.sources["memory"] == "profile lab" and s.sources["host"] == "profile lab"
    env.setenv("HUTCH_PIDS", "10")
    env.setenv("HUTCH_PROFILE", "empty")
    s = Settings.load()  # the env's profile, with nothing in it: the file's values
    assert (s.memory, s.pids, s.host, s.profile) == ("3G", 10, "unix:///file.sock", "empty")
    s = Settings.load(profile="lab", memory="1G")  # the flag's profile beats the env's; a flag beats the profile
    assert (s.memory, s.pids, s.host) == ("1G", 10, "https://lab.example:8765")
    env.delenv("HUTCH_PROFILE")
    s = Settings.load()
    assert (s.memory, s.host, s.profile) == ("3G", "unix:///file.sock", "")


def test_unknown_profile_lists_the_known_ones(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "home" / "config.toml").write_text("[profiles.b]\n[profiles.a]\nhost = 'x'\n")
    with pytest.raises(InvalidError, match=r"unknown profile 'c' \(known: a, b\)") as exc:
        Settings.load(profile="c")
    assert "[profiles.c]" in str(exc.value.hint)
    (tmp_path / "home" / "config.toml").unlink()
    with pytest.raises(InvalidError, match=r"known: none"):
        Settings.load(profile="a")


# -- a bad value names its setting and where it came from ----------------------------------


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("HUTCH_PIDS", "abc", "whole number"),
        ("HUTCH_OUTPUT_CAP", "1X", "size"),
        ("HUTCH_MEMORY", "lots", "size"),
        ("HUTCH_EXEC_TIMEOUT", "soon", "seconds"),
    ],
)
def test_a_bad_variable_is_named_with_what_it_should_be(env: pytest.MonkeyPatch, var: str, value: str, expected: str) -> None:
    env.setenv(var, value)
    with pytest.raises(InvalidError) as info:
        Settings.load()
    assert f"(from {var})" in info.value.message and repr(value) in info.value.message
    assert "invalid literal" not in info.value.message  # not Python's words
    assert info.value.hint is not None and info.value.hint.startswith(f"set {var} to ") and expected in info.value.hint


def test_a_bad_file_value_names_the_file_and_the_profile(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "home" / "config.toml"
    cfg.write_text('pids = "many"\n')
    with pytest.raises(InvalidError) as info:
        Settings.load()
    assert f"pids='many' (from {cfg})" in info.value.message
    cfg.write_text('[profiles.lab]\ncpus = "two"\n')
    with pytest.raises(InvalidError) as info:
        Settings.load(profile="lab")
    assert f"(from [profiles.lab] of {cfg})" in info.value.message
    assert "set cpus in [profiles.lab]" in (info.value.hint or "")


def test_hutch_config_naming_a_missing_file_is_an_error(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.toml"
    env.setenv("HUTCH_CONFIG", str(missing))
    with pytest.raises(InvalidError) as info:
        Settings.load()
    assert str(missing) in info.value.message and "HUTCH_CONFIG" in info.value.message
    assert "unset HUTCH_CONFIG" in (info.value.hint or "")
    env.setenv("HUTCH_CONFIG", "")  # empty is unset
    assert Settings.load().config_path == str(tmp_path / "home" / "config.toml")
    # without HUTCH_CONFIG, a missing $HUTCH_HOME/config.toml is simply no file
    env.delenv("HUTCH_CONFIG")
    assert Settings.load().pids == 512
