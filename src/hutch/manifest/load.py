"""Reading a manifest into the spec builder's arguments, and flags merged over them.

Errors name the file and the line: ``hutch.toml:7: network.ports[1]: Input should be a
valid integer``. A manifest found in the current directory without being named (the
``manifest`` setting) is *restricted*: it cannot declare what reaches beyond the sandbox
(mounts, a network, secrets, host files, the caller's environment, a clone); a cloned
repository could carry it. Naming the file (``--manifest FILE``, or ``--manifest`` alone for
./hutch.toml) is what trusts it.
"""

from __future__ import annotations

import os

from hutch.errors import InvalidError
from hutch.manifest import DEFAULT_NAME, refs
from hutch.wire.build import git_depth, git_source, mount, secret_binding, seed_file

# hutch run reads no manifest unless there is one: typing, re, pathlib and base64 (and the
# line finder, which needs re) are loaded only to read one.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from hutch.manifest.lines import Path as KeyPath

MAX_MANIFEST = 4 << 20  # bytes of a manifest file (seeded files are capped at 1 MiB in the spec)
MAX_ERRORS = 20
HINT = "see docs/manifest.md for every key, or hutch manifest show FILE to check a file"
RESTRICTED = {
    "mounts": "mounts of host paths",
    "network": "a network",
    "secrets": "secrets",
    "secret_hosts": "secret bindings",
    "secret_body": "secret bindings",
    "pass_env": "variables of your environment",
    "host_ca": "the host's CA bundle",
    "git": "a clone",
}


class Loaded:
    """A manifest read and checked: the builder's arguments (no secret value read yet). (A
    plain class: ``hutch run`` imports this module, and ``typing`` or ``dataclasses`` would be
    a tenth of its start.)"""

    __slots__ = ("args", "pass_env", "path")

    def __init__(self, path: str, args: dict[str, Any], pass_env: list[str]) -> None:
        self.path, self.args, self.pass_env = path, args, pass_env

    def __repr__(self) -> str:
        return f"Loaded(path={self.path!r}, args=..., pass_env={self.pass_env!r})"


def find(given: str | None, setting: str = "") -> tuple[str, bool] | None:
    """The manifest to use and whether it is trusted: ``given`` ("" for --manifest alone: the
    default name here), else the ``manifest`` setting's file here, restricted, if it exists."""
    if given is not None:
        return (given or DEFAULT_NAME), True
    if setting and os.path.isfile(setting):
        return setting, False
    return None


def read(path: str) -> tuple[str, dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_MANIFEST + 1)
    except OSError as exc:
        raise InvalidError(f"cannot read manifest {path}: {exc.strerror}", hint="check the path") from exc
    if len(raw) > MAX_MANIFEST:
        raise InvalidError(f"manifest {path} is larger than {MAX_MANIFEST >> 20} MiB", hint="seed large trees with git")
    import tomllib  # here: hutch run without a manifest does not parse TOML

    try:
        text = raw.decode()
        return text, tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise InvalidError(f"manifest {path} is not UTF-8 text", hint="save it as UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidError(f"{path}: not valid TOML: {exc}", hint=HINT) from exc


def load(path: str, *, trusted: bool = True) -> Loaded:
    """Read, check against the schema (every error with its line) and turn into arguments."""
    from pydantic import ValidationError

    from hutch.manifest.lines import locate
    from hutch.manifest.schema import Manifest

    text, data = read(path)
    try:
        m = Manifest.model_validate(data)
    except ValidationError as exc:
        where = locate(text)
        found = [_problem(path, where, loc, msg) for loc, msg in _union_pruned(exc.errors(include_input=False))]
        problems = [text for _, text in sorted(found)]
        more = f"\n  ... and {len(problems) - MAX_ERRORS} more" if len(problems) > MAX_ERRORS else ""
        raise InvalidError(f"invalid manifest {path}:\n  " + "\n  ".join(problems[:MAX_ERRORS]) + more, hint=HINT) from None
    where = locate(text)

    def fail(key: KeyPath, message: str, hint: str = HINT) -> InvalidError:
        return InvalidError(f"invalid manifest {path}:\n  {_problem(path, where, key, message)[1]}", hint=hint)

    if not trusted:
        for key, what in RESTRICTED.items():
            if key in m.model_fields_set and getattr(m, key) not in (None, False, [], {}):
                raise fail(
                    (key,),
                    f"a manifest found in the current directory cannot declare {what}",
                    hint=f"if you trust this file, name it: --manifest {path}",
                )
    names = m.secret_names()
    for name in m.secret_hosts:
        if name not in names:
            raise fail(("secret_hosts", name), f"{name} is not in [secrets]")
    base = os.path.dirname(os.path.realpath(path)) if not path.startswith("/dev/") else os.getcwd()
    try:
        return Loaded(path, _args(m, base, trusted), list(m.pass_env))
    except _AtError as at:
        raise fail(at.key, at.message, at.hint or HINT) from None


class _AtError(Exception):
    def __init__(self, key: KeyPath, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.key, self.message, self.hint = key, message, hint


TAGS = {"str", "int", "float", "bool", "MountEntry", "FileEntry", "Git", "Limits", "Network"}


def _strip(loc: tuple[Any, ...]) -> KeyPath:
    """A schema error's location without pydantic's union branch tags."""
    return tuple(p for p in loc if not (isinstance(p, str) and (p in TAGS or "[" in p)))


def _union_pruned(errors: list[Any]) -> list[tuple[KeyPath, str]]:
    """The errors, less a union's "should be a valid string" when its other branch says more."""
    out = [(_strip(tuple(e["loc"])), str(e["msg"]), len(e["loc"]) != len(_strip(tuple(e["loc"])))) for e in errors]
    plain = [(loc, msg) for loc, msg, tagged in out if not (tagged and msg.startswith("Input should be a valid"))]
    return [(loc, msg) for loc, msg, _ in out if (loc, msg) in plain or not any(p[: len(loc)] == loc for p, _ in plain)]


def _problem(path: str, where: dict[KeyPath, int], loc: KeyPath, msg: str) -> tuple[int, str]:
    """(its line, the line of the error) for one schema error."""
    import re

    from hutch.manifest.lines import line_of

    text = msg.removeprefix("Value error, ")
    named = re.match(r"secret (\S+):", text)
    if loc == ("secrets",) and named:  # the table's check names the entry: point at it
        loc, text = ("secrets", named.group(1)), text[named.end() :].strip()
    if msg.startswith("Extra inputs"):
        text = "unknown key"
    line = line_of(where, loc)
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(document)"
    return line or 0, f"{path}:{line if line else '?'}: {key}: {text}"


def _args(m: Any, base: str, trusted: bool) -> dict[str, Any]:
    """The builder's arguments a checked manifest gives (relative paths: to ``base``)."""
    args: dict[str, Any] = {}
    for key in ("name", "provider", "image", "runtime", "user", "workdir", "tenant", "ttl", "idle_timeout", "on_expire"):
        if getattr(m, key) is not None:
            args[key] = getattr(m, key)
    renamed = (("host_ca", "host_ca"), ("ssh", "ssh"), ("unikraft_metro", "metro"), ("placement", "placement"), ("node", "node"))
    for key, to in renamed:
        if getattr(m, key) is not None:
            args[to] = getattr(m, key)
    if m.limits is not None:
        args.update({k: v for k, v in m.limits.model_dump().items() if v is not None})
    if m.env:
        args["env"] = dict(m.env)
    if m.labels:
        args["labels"] = dict(m.labels)
    if m.network is not None:
        net = m.network
        args.update(network=net.mode, allow_hosts=list(net.hosts), allow_ports=list(net.ports), allow_cidrs=list(net.cidrs))
    mounts = []
    for i, entry in enumerate(m.mounts):
        try:
            one = mount(entry, "mount") if isinstance(entry, str) else {**entry.model_dump()}
        except InvalidError as exc:
            raise _AtError(("mounts", i), exc.message, exc.hint) from None
        source = os.path.expanduser(str(one["source"]))
        mounts.append({**one, "source": os.path.normpath(os.path.join(base, source))})
    if mounts:
        args["mounts"] = mounts
    sources = {name: _source(source, base) for name, source in m.secret_sources().items()}
    if sources:
        args["secret_sources"] = sources
    if m.secret_hosts:
        args["secret_hosts"] = {name: list(hosts) for name, hosts in m.secret_hosts.items()}
    if m.secret_body:
        args["secret_body"] = list(m.secret_body)
    if m.no_intercept:
        args["no_intercept"] = list(m.no_intercept)
    if m.require_approval:
        args["require_approval"] = list(m.require_approval)
    files = [_file(i, f, base, trusted) for i, f in enumerate(m.files)]
    if files:
        args["files"] = files
    if m.setup:
        args["setup"] = list(m.setup)
    if m.git is not None:
        args["git"] = _git(m.git, base)
    return args


def _source(source: str, base: str) -> str:
    kind, _, where = source.partition(":")
    return f"file:{os.path.join(base, os.path.expanduser(where))}" if kind == "file" else source


def _file(i: int, f: Any, base: str, trusted: bool) -> dict[str, Any]:
    if f.source is not None:
        if not trusted:
            raise _AtError(
                ("files", i, "source"),
                "a manifest found in the current directory cannot copy host files",
                "if you trust this file, name it: --manifest FILE",
            )
        where = os.path.join(base, os.path.expanduser(f.source))
        try:
            with open(where, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise _AtError(("files", i, "source"), f"cannot read {where}: {exc.strerror}", "check the path") from None
    elif f.content_base64 is not None:
        try:
            import base64

            data = base64.b64decode(f.content_base64, validate=True)
        except ValueError:
            raise _AtError(("files", i, "content_base64"), "not base64") from None
    else:
        data = f.content.encode()
    from hutch.checks import check_mode

    try:
        mode = check_mode(f.mode)
    except InvalidError as exc:
        raise _AtError(("files", i, "mode"), exc.message, exc.hint) from None
    return dict(seed_file(f.path, data, mode))


def _git(g: Any, base: str) -> dict[str, Any]:
    from hutch.manifest.schema import Git

    try:
        if isinstance(g, str):
            return dict(git_source(g, base=base))
        assert isinstance(g, Git)
        url = g.repo + (f"#{g.ref}" if g.ref and "#" not in g.repo else "")
        depth = 1 if g.depth is None else g.depth
        return dict(git_source(url, depth=depth, secret=g.secret, username=g.username, max_size=g.max_size, base=base))
    except InvalidError as exc:
        raise _AtError(("git",), exc.message.replace("--git-repo", "git"), exc.hint) from None


# -- flags over the file ------------------------------------------------------------------

LISTS = (
    "allow_hosts",
    "allow_ports",
    "allow_cidrs",
    "mounts",
    "require_approval",
    "files",
    "setup",
    "secret_body",
    "no_intercept",
)
TABLES = ("env", "labels", "secret_sources", "secrets", "secret_hosts")


def given(value: Any) -> bool:
    return value not in (None, False, (), [], {}, "")


def merge(file_args: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags over the file: a value replaces the file's, a table (env, labels, secrets) adds its
    keys over the file's, a list (hosts, ports, mounts, approvals, files, setup) adds to the file's.
    ``--network none`` drops the file's allow rules; ``git_depth``/``git_secret`` change the file's clone."""
    out = dict(file_args)
    flags = {k: v for k, v in flags.items() if given(v)}
    if "secret_hosts" in flags:  # --secret-host NAME=HOST items, or a mapping
        flags["secret_hosts"] = secret_binding(flags["secret_hosts"])
    if flags.get("network") == "none":
        for key in ("allow_hosts", "allow_ports", "allow_cidrs"):
            out.pop(key, None)
    tweaks = {k.removeprefix("git_"): flags.pop(k) for k in ("git_depth", "git_secret", "git_max_size") if k in flags}
    for key, value in flags.items():
        if key in LISTS:
            out[key] = [*out.get(key, ()), *value]
        elif key in TABLES:
            out[key] = {**out.get(key, {}), **value}
        else:
            out[key] = value
    if tweaks and "git" not in out:
        raise InvalidError(
            "--git-depth, --git-secret and --git-max-size need a clone", hint="add --git-repo URL, or git to the manifest"
        )
    if tweaks and "git" not in flags:  # the file's clone, changed
        if "depth" in tweaks:
            tweaks["depth"] = git_depth(tweaks["depth"])
        out["git"] = {**out["git"], **tweaks}
    return out


def spec_args(manifest: str | None, flags: Mapping[str, Any], setting: str = "") -> dict[str, Any]:
    """The builder's arguments of an edge: the manifest (``manifest``, or the setting's file
    here) with ``flags`` over it, its secrets and passed variables read now."""
    found = find(manifest, setting)
    if found is None:
        return merge({}, flags)
    loaded = load(*found[:1], trusted=found[1])
    args = merge(loaded.args, flags)
    file_sources = {k: v for k, v in loaded.args.get("secret_sources", {}).items() if k not in args.get("secrets", {})}
    args["secrets"] = {**refs.resolve(file_sources), **args.get("secrets", {})}
    passed = {}
    for name in loaded.pass_env:
        if name not in os.environ:
            raise InvalidError(f"{loaded.path}: pass_env names {name}, which is not set here", hint=f"export {name}=...")
        passed[name] = os.environ[name]
    args["env"] = {**passed, **args.get("env", {})}
    return args
