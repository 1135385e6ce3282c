"""Manifests without a daemon: every key into the spec, flags over the file, errors with
their line, inline secrets refused, the restricted manifest of the current directory, and
``manifest show``'s TOML read back into the same spec."""

from __future__ import annotations

import base64
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from hutch.config import Settings
from hutch.errors import InvalidError
from hutch.manifest.lines import locate
from hutch.manifest.load import find, load, merge, spec_args
from hutch.manifest.show import dumps, manifest_of
from hutch.models import SandboxSpec
from hutch.wire.build import git_source, sandbox_spec

FULL = """\
version = 1
name = "web"
provider = "local"
image = "python:3.12-slim"
runtime = "gvisor"
user = "1000:1000"
workdir = "/workspace/app"
host_ca = true
tenant = "team-a"
ttl = "2h"
idle_timeout = 600
on_expire = "pause"
require_approval = ["destroy", "exec:git push*"]
setup = ["make deps", ["python3", "-c", "print(1)"]]
pass_env = ["HUTCH_T_PASSED"]
secret_body = ["KEY"]
no_intercept = ["pinned.example.com"]

[limits]
memory = "512M"
pids = 128
cpus = 0.5
disk = "2G"

[env]
MODE = "test"

[labels]
team = "a"

[secrets]
TOKEN = "env:HUTCH_T_TOKEN"
KEY = "file:key.txt"

[secret_hosts]
KEY = ["api.example.com"]

[network]
mode = "allowlist"
hosts = ["example.com", "*.example.org", "api.example.com"]
ports = [443, 8443]
cidrs = ["203.0.113.0/24"]

[git]
repo = "https://git.example.com/org/app.git"
ref = "v1.2"
depth = "full"
secret = "TOKEN"
max_size = "100M"

[[mounts]]
source = "data"
target = "/data"
readonly = true

[[files]]
path = "/workspace/.env"
content = "A=1\\n"
mode = "600"

[[files]]
path = "bin/blob"
content_base64 = "AAEC"

[[files]]
path = "copied.txt"
source = "local.txt"
"""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture
def full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HUTCH_T_TOKEN", "tok-value")
    monkeypatch.setenv("HUTCH_T_PASSED", "passed-value")
    (tmp_path / "key.txt").write_text("key-value\n")
    (tmp_path / "local.txt").write_text("from the host\n")
    path = tmp_path / "hutch.toml"
    path.write_text(FULL)
    return path


def spec_of(settings: Settings, manifest: str | None, **flags: Any) -> SandboxSpec:
    return SandboxSpec.model_validate(sandbox_spec(settings, **spec_args(manifest, flags)))


def test_every_key_reaches_the_spec(settings: Settings, full: Path) -> None:
    spec = spec_of(settings, str(full))
    base = full.parent
    assert (spec.name, spec.provider, spec.image, spec.user, spec.workdir) == (
        "web", "local", "python:3.12-slim", "1000:1000", "/workspace/app"
    )  # fmt: skip
    assert spec.host_ca and spec.tenant == "team-a" and spec.runtime == "gvisor"
    assert (spec.ttl, spec.idle_timeout, spec.on_expire) == (7200.0, 600.0, "pause")
    assert spec.require_approval == ["destroy", "exec:git push*"]
    assert spec.setup == ["make deps", ["python3", "-c", "print(1)"]]
    assert (spec.limits.memory, spec.limits.pids, spec.limits.cpus, spec.limits.disk) == (512 << 20, 128, 0.5, 2 << 30)
    assert spec.env == {"MODE": "test", "HUTCH_T_PASSED": "passed-value"}
    assert spec.labels == {"team": "a"}
    assert spec.secrets == {"TOKEN": "tok-value", "KEY": "key-value"}
    assert spec.secret_sources == {"TOKEN": "env:HUTCH_T_TOKEN", "KEY": f"file:{base / 'key.txt'}"}
    assert (spec.secret_hosts, spec.secret_body, spec.no_intercept) == (
        {"KEY": ["api.example.com"]},
        ["KEY"],
        ["pinned.example.com"],
    )
    net = spec.network
    assert (net.mode, net.allow_hosts, net.ports, net.cidrs) == (
        "allowlist", ["*.example.org", "api.example.com", "example.com"], [443, 8443], ["203.0.113.0/24"]
    )  # fmt: skip
    assert spec.git is not None
    assert (spec.git.url, spec.git.ref, spec.git.depth, spec.git.secret, spec.git.max_size) == (
        "https://git.example.com/org/app.git", "v1.2", None, "TOKEN", 100 << 20
    )  # fmt: skip
    assert [(m.source, m.target, m.readonly) for m in spec.mounts] == [(str(base / "data"), "/data", True)]
    files = {f.path: (f.data(), f.mode) for f in spec.files}
    assert files == {
        "/workspace/.env": (b"A=1\n", 0o600),
        "bin/blob": (b"\x00\x01\x02", 0o644),
        "copied.txt": (b"from the host\n", 0o644),
    }


def test_flags_win_over_the_file(settings: Settings, full: Path) -> None:
    spec = spec_of(
        settings,
        str(full),
        name="other",
        memory="1G",
        env={"MODE": "prod", "EXTRA": "1"},
        labels={"team": "b"},
        allow_hosts=["extra.example.net"],
        setup=["echo last"],
        ttl=60,
        git_depth="5",
    )
    assert spec.name == "other" and spec.limits.memory == 1 << 30 and spec.limits.pids == 128
    assert spec.env == {"MODE": "prod", "EXTRA": "1", "HUTCH_T_PASSED": "passed-value"}
    assert spec.labels == {"team": "b"}
    assert spec.network.allow_hosts == ["*.example.org", "api.example.com", "example.com", "extra.example.net"]
    bound = spec_of(settings, str(full), secret_hosts=("TOKEN=api.example.com",))
    assert bound.secret_hosts == {"KEY": ["api.example.com"], "TOKEN": ["api.example.com"]}
    assert spec.setup[-1] == "echo last" and len(spec.setup) == 3
    assert spec.ttl == 60 and spec.git is not None and spec.git.depth == 5 and spec.git.ref == "v1.2"
    closed = spec_of(settings, str(full), network="none")
    assert closed.network.mode == "none" and closed.network.allow_hosts == []
    repo = spec_of(settings, str(full), git=git_source("https://git.example.com/other.git#dev"))
    assert repo.git is not None and (repo.git.url, repo.git.ref, repo.git.depth) == (
        "https://git.example.com/other.git",
        "dev",
        1,
    )


def test_a_flag_secret_wins_and_git_flags_need_a_clone(settings: Settings, full: Path) -> None:
    spec = spec_of(settings, str(full), secrets={"TOKEN": "flag-value"}, secret_sources={"TOKEN": "env:OTHER"})
    assert spec.secrets["TOKEN"] == "flag-value" and spec.secret_sources["TOKEN"] == "env:OTHER"
    with pytest.raises(InvalidError, match="need a clone"):
        spec_of(settings, None, git_depth="3")


def check_error(tmp_path: Path, text: str, *expected: str) -> str:
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(InvalidError) as err:
        load(str(path))
    for want in expected:
        assert want.replace("FILE", str(path)) in err.value.message, err.value.message
    return err.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('name = "a"\nimage_ref = "x"\n', "FILE:2: image_ref: unknown key"),
        ('[limits]\nmemory = "1G"\nswap = "1G"\n', "FILE:3: limits.swap: unknown key"),
        ('[limits]\npids = "100"\n', "FILE:2: limits.pids: Input should be a valid integer"),
        ("ttl = true\n", "FILE:1: ttl:"),
        ('[network]\nmode = "wide"\n', "FILE:2: network.mode: Input should be"),
        ('[network]\nports = [\n  443,\n  "x",\n]\n', "FILE:4: network.ports[1]: Input should be a valid integer"),
        ('[[files]]\npath = "a"\n', "FILE:1: files[0]: give exactly one of content"),
        ('[[files]]\npath = "a"\ncontent = "x"\nmode = "999"\n', "FILE:4: files[0].mode: invalid file mode"),
        ('[[mounts]]\nsource = "a"\n', "FILE:1: mounts[0].target: Field required"),
        ('mounts = ["nocolon"]\n', "FILE:1: mounts[0]: invalid mount"),
        ("version = 2\n", "FILE:1: version: Input should be 1"),
        ('runtime = "docker"\n', "FILE:1: runtime: Input should be 'bwrap' or 'gvisor'"),
        ('[git]\nrepo = "git@git.example.com:org/x.git"\n', "FILE:1: git: invalid git"),
        ('[secrets]\nA = "env:A"\n[secret_hosts]\nB = ["api.example.com"]\n', "FILE:4: secret_hosts.B: B is not in [secrets]"),
        ('name = "a"\nsetup = ["x"\n', "not valid TOML"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    check_error(tmp_path, text, expected)


def test_several_errors_come_together_in_line_order(tmp_path: Path) -> None:
    message = check_error(tmp_path, 'zzz = 1\n[limits]\npids = "x"\n[env]\nA = 1\n', "FILE:1: zzz", "FILE:3: limits.pids")
    assert message.index(":1:") < message.index(":3:") < message.index(":5:")


@pytest.mark.parametrize(
    "text",
    [
        '[secrets]\nTOKEN = "hunter2-inline"\n',
        'secrets = ["OK", "TOKEN=hunter2-inline"]\n',
        '[secrets]\nTOKEN = "env:"\nOTHER = "hunter2-inline"\n',
    ],
)
def test_inline_secret_values_are_refused_and_never_echoed(tmp_path: Path, text: str) -> None:
    message = check_error(tmp_path, text, "inline secret values are refused")
    assert "hunter2" not in message
    line = text.splitlines().index(next(x for x in text.splitlines() if "hunter2" in x or 'env:"' in x)) + 1
    assert f":{line}:" in message or ":1:" in message


def test_a_git_url_with_credentials_is_refused_with_the_secret_alternative(tmp_path: Path) -> None:
    message = check_error(
        tmp_path, '[git]\nrepo = "https://me:hunter2@git.example.com/x.git"\n', "FILE:1: git: a git URL with credentials"
    )
    assert "hunter2" not in message
    for url in ("https://hunter2@git.example.com/x.git", "http://u:p@git.example.com/x.git"):
        with pytest.raises(InvalidError, match="credentials") as err:
            git_source(url)
        assert "hunter2" not in err.value.message and ":p@" not in err.value.message
        assert err.value.hint and "--git-secret" in err.value.hint


def test_git_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert git_source("repo#main") == {"url": f"file://{tmp_path / 'repo'}", "ref": "main", "depth": 1}
    assert git_source("file:///srv/r", depth="full")["depth"] is None
    assert git_source("https://git.example.com/a.git#v1", depth=3, secret="T") == {
        "url": "https://git.example.com/a.git", "ref": "v1", "depth": 3, "secret": "T"
    }  # fmt: skip
    for bad, why in (("git@host:x.git", "scp-like"), ("ftp://host/x", "unsupported"), ("#main", "invalid")):
        with pytest.raises(InvalidError, match=why):
            git_source(bad)
    for depth in (0, -1, "many", True):
        with pytest.raises(InvalidError, match="git depth"):
            git_source("https://git.example.com/a.git", depth=depth)
    for ref in ("-upload-pack=x", "a..b", "a b"):
        with pytest.raises(InvalidError, match="invalid git ref"):
            SandboxSpec.model_validate({"git": {"url": "https://git.example.com/a.git", "ref": ref}})


RESTRICTED = [
    ('[[mounts]]\nsource = "/home"\ntarget = "/h"\n', "mounts"),
    ('[network]\nmode = "open"\n', "network"),
    ('[secrets]\nAWS = "env:AWS_SECRET_ACCESS_KEY"\n', "secrets"),
    ('pass_env = ["HOME"]\n', "pass_env"),
    ("host_ca = true\n", "host_ca"),
    ('git = "https://git.example.com/x.git"\n', "git"),
    ('[[files]]\npath = "k"\nsource = "/etc/hostname"\n', "files[0].source"),
]


def test_a_manifest_in_the_current_directory_is_used_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hutch.toml").write_text('[[mounts]]\nsource = "/"\ntarget = "/host"\n')
    assert find(None) is None  # not asked: never read
    assert find("") == ("hutch.toml", True)  # --manifest alone: asked for, trusted
    assert find(None, "hutch.toml") == ("hutch.toml", False)  # the setting: used, restricted
    assert find(None, "missing.toml") is None


@pytest.mark.parametrize(("text", "key"), RESTRICTED)
def test_a_manifest_found_by_the_setting_cannot_reach_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings, text: str, key: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    (tmp_path / "hutch.toml").write_text('name = "cloned"\nsetup = ["make"]\n' + text)
    with pytest.raises(InvalidError, match=f"{key.split('[')[0]}.*cannot") as err:
        spec_args(None, {}, "hutch.toml")
    assert err.value.hint and "--manifest" in err.value.hint
    (tmp_path / "hutch.toml").write_text('name = "cloned"\nsetup = ["make"]\n')
    spec = SandboxSpec.model_validate(sandbox_spec(settings, **spec_args(None, {}, "hutch.toml")))
    assert spec.name == "cloned" and spec.setup == ["make"]


def test_manifest_show_reads_back_into_the_same_spec(settings: Settings, full: Path, tmp_path: Path) -> None:
    spec = sandbox_spec(settings, **spec_args(str(full), {}))
    text = dumps(manifest_of(spec), "a comment")
    tomllib.loads(text)
    again = tmp_path / "again.toml"
    again.write_text(text)
    spec2 = sandbox_spec(settings, **spec_args(str(again), {}))
    skip = {"secrets"}  # values: read again from the same references
    assert {k: v for k, v in spec2.items() if k not in skip} == {k: v for k, v in spec.items() if k not in skip}
    assert spec2["secrets"] == spec["secrets"]


def test_a_record_without_env_values_shows_them_as_pass_env(settings: Settings) -> None:
    spec = sandbox_spec(settings, env={"KEEP": "***", "A": "***"}, secrets={"S": "v"})
    spec["secret_names"] = ["S"]
    doc = manifest_of(spec)
    assert doc["pass_env"] == ["A", "KEEP"] and "env" not in doc and doc["secrets"] == {"S": "env:S"}


def test_toml_out_escapes_what_it_must() -> None:
    doc = {"env": {"odd key": 'quote " backslash \\ tab \t nl \n del \x7f é'}, "files": [{"path": "x", "mode": "644"}]}
    assert tomllib.loads(dumps(doc)) == doc


def test_lines_of_keys_and_elements() -> None:
    text = '# c\na = 1\n[t]\nb = [\n  "x",  # c\n  "y,]",\n]\n[[f]]\np = """\nz = 1\n"""\n[[f]]\nq = { r = 1, s = [1,\n 2] }\n'
    tomllib.loads(text)
    where = locate(text)
    assert where[("a",)] == 2 and where[("t",)] == 3 and where[("t", "b", 1)] == 6
    assert where[("f", 0, "p")] == 9 and where[("f", 1)] == 12 and where[("f", 1, "q", "s", 1)] == 14
    assert ("z",) not in where


def test_seeded_files_are_bounded(settings: Settings) -> None:
    big = base64.b64encode(os.urandom(700 << 10)).decode()
    with pytest.raises(InvalidError, match="the limit is 1M"):
        SandboxSpec.model_validate({"files": [{"path": "a", "content": big}, {"path": "b", "content": big}]})
    with pytest.raises(InvalidError, match="not a reference"):
        SandboxSpec.model_validate({"secret_sources": {"A": "hunter2"}})


def test_merge_is_flags_over_file() -> None:
    out = merge({"name": "a", "env": {"A": "1"}, "allow_hosts": ["x"]}, {"name": None, "env": {"B": "2"}, "allow_hosts": ()})
    assert out == {"name": "a", "env": {"A": "1", "B": "2"}, "allow_hosts": ["x"]}


def test_a_clusters_placement_and_node_from_the_file_flags_win_and_show_keeps_them(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "hutch.toml"
    path.write_text('placement = "pack"\nnode = "10.0.0.2"\n')
    assert spec_of(settings, str(path)).provider_options == {"placement": "pack", "node": "10.0.0.2"}
    assert spec_of(settings, str(path), node="10.0.0.3").provider_options == {"placement": "pack", "node": "10.0.0.3"}
    shown = manifest_of(sandbox_spec(settings, **spec_args(str(path), {})))
    assert (shown["placement"], shown["node"]) == ("pack", "10.0.0.2")
    path.write_text('placement = "scatter"\n')
    with pytest.raises(InvalidError) as bad:
        load(str(path))
    assert "placement" in bad.value.message
