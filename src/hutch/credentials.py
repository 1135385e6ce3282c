"""Provider credentials of the caller: read where the command runs, sent with each request.

The caller's provider tokens (and what says where to use them: the Unikraft metro) are read
from its environment or config file at each command, travel in one request header
(:data:`HEADER`) over the owner-only unix socket or TLS only, and are held in the daemon's
memory only (``hutch.service.keyring``): never on argv, on disk, in the store, logs, events
or error messages. Only a fingerprint (a short hash, :func:`fingerprint`) is ever shown.

The daemon's own credentials (an opt-in owner-only ``--credentials-file``, its environment)
use the same :class:`Credential`. Cheap to import (standard library only): the CLI builds
the header.
"""

from __future__ import annotations

import binascii
import os
import stat
from contextvars import ContextVar
from types import MappingProxyType

from hutch import jsonwire
from hutch.errors import InvalidError

# Every CLI call gathers credentials: typing, pathlib, json and base64 (each loading more)
# stay out of its start; the records below are plain classes, not NamedTuples, for that.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

HEADER = "x-hutch-credentials"
MAX_HEADER = 8192  # bytes of the header value
MAX_TOKEN = 4096
MAX_FILE = 64 << 10
MAX_ENTRIES = 16  # credentials per provider in a credentials file
UNIKRAFT_TOKEN_VARS = ("HUTCH_UNIKRAFT_TOKEN", "UKC_TOKEN", "UKC_API_KEY")
UNIKRAFT_METRO_VAR = "UKC_METRO"
PROVIDERS = ("unikraft",)
CONFIG_SOURCE = "config file (unikraft_token)"
TOKEN_HINT = (
    f"export one of {', '.join(UNIKRAFT_TOKEN_VARS)} in the shell you run hutch from (it travels with each "
    "request and the daemon keeps it in memory), or set unikraft_token in config.toml; "
    "an unattended daemon can read an owner-only file: hutch serve --credentials-file PATH"
)
HOLD_HINT = (  # an account's resources need its credential, and the daemon holds none
    "run any hutch command with this account's token in the environment (UKC_TOKEN or HUTCH_UNIKRAFT_TOKEN): "
    "it travels with the request and the daemon keeps it in memory; an unattended daemon can read an owner-only "
    "file (hutch serve --credentials-file PATH)"
)


class Credential:
    """One provider credential (a value: equal by its fields). ``source`` says where it was
    found (a variable name, the config file, the credentials file): safe to show; the token never is."""

    __slots__ = ("metro", "provider", "source", "token")

    def __init__(self, provider: str, token: str = "", source: str = "", metro: str = "") -> None:
        self.provider, self.token, self.source, self.metro = provider, token, source, metro

    def _fields(self) -> tuple[str, str, str, str]:
        return (self.provider, self.token, self.source, self.metro)

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if isinstance(other, Credential) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.token)

    def __repr__(self) -> str:
        return f"Credential(provider={self.provider!r}, source={self.source!r}, metro={self.metro!r})"


def fingerprint(token: str) -> str:
    """A short, stable, one-way name for a token (what hutch shows instead of it)."""
    import hashlib

    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:12]


# The provider credentials the current request brought (set by the server for each request).
CALLER: ContextVar[Mapping[str, Credential]] = ContextVar("hutch_caller_credentials", default=MappingProxyType({}))


def config_file(environ: Mapping[str, str], home: str | Path | None = None) -> dict[str, object]:
    """hutch's config file (``HUTCH_CONFIG`` or ``$HUTCH_HOME/config.toml``) as a dict; {} when absent or unreadable."""
    if not environ.get("HUTCH_CONFIG") and home is None:
        from hutch.config import default_home_dir

        home = environ.get("HUTCH_HOME") or default_home_dir()
    path = environ.get("HUTCH_CONFIG") or os.path.join(home or ".", "config.toml")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return {}
    import tomllib  # here: most calls have no config file

    try:
        return dict(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return {}


def gather(environ: Mapping[str, str], home: str | Path | None = None) -> dict[str, Credential]:
    """The provider credentials of an environment (and its config file): for the Unikraft
    Cloud, the first of ``UNIKRAFT_TOKEN_VARS``, else the config file's ``unikraft_token``;
    the metro from ``UKC_METRO``, else the config file's ``unikraft_metro``."""
    token, source = "", ""
    for var in UNIKRAFT_TOKEN_VARS:
        value = environ.get(var, "").strip()
        if value:
            token, source = value, var
            break
    metro = environ.get(UNIKRAFT_METRO_VAR, "").strip()
    if not token or not metro:
        cfg = config_file(environ, home)
        if not token and cfg.get("unikraft_token") not in (None, ""):
            token, source = str(cfg["unikraft_token"]).strip(), CONFIG_SOURCE
        if not metro and cfg.get("unikraft_metro") not in (None, ""):
            metro = str(cfg["unikraft_metro"]).strip()
    if not token and not metro:
        return {}
    return {"unikraft": Credential("unikraft", token, source, metro)}


def encode(creds: Mapping[str, Credential]) -> str:
    """The header value: base64url of a JSON object, provider -> {token, source, metro}."""
    doc = {name: {"token": c.token, "source": c.source, "metro": c.metro} for name, c in creds.items()}
    return _pack(doc)


def _text(value: object, what: str, limit: int, header: str = HEADER) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit or not all(32 <= ord(ch) < 127 for ch in value):
        raise InvalidError(f"the {header} header has an invalid {what}", hint=f"printable ASCII, at most {limit} characters")
    return value.strip()


def decode(value: str) -> dict[str, Credential]:
    """The credentials of a header value; bounded and strict (errors never quote it).
    Providers this daemon does not know are ignored (a newer client may send more)."""
    hint = "the header is built by hutch's client; check the client's version"
    if len(value) > MAX_HEADER:
        raise InvalidError(f"the {HEADER} header is longer than {MAX_HEADER} bytes", hint=hint)
    try:
        doc = _unpack(value)
    except (binascii.Error, ValueError):
        raise InvalidError(f"the {HEADER} header is not base64url JSON", hint=hint) from None
    if not isinstance(doc, dict):
        raise InvalidError(f"the {HEADER} header is not an object", hint=hint)
    out: dict[str, Credential] = {}
    for name in PROVIDERS:
        entry = doc.get(name)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise InvalidError(f"the {HEADER} header's {name} entry is not an object", hint=hint)
        token = _text(entry.get("token"), f"{name} token", MAX_TOKEN)
        source = _text(entry.get("source"), f"{name} source", 100)
        metro = _text(entry.get("metro"), f"{name} metro", 300)
        if token or metro:
            out[name] = Credential(name, token, source, metro)
    return out


def sendable(scheme: str, address: str, remote: bool) -> bool:
    """Credentials travel only over a unix socket of this user or TLS (never plain TCP)."""
    if scheme == "https":
        return True
    if scheme != "unix":
        return False
    if not remote:
        return True  # the daemon's own socket in HUTCH_HOME (owner-only)
    try:
        return os.stat(address).st_uid == os.geteuid()
    except OSError:
        return False


def load_file(path: str) -> list[Credential]:
    """An owner-only credentials file (TOML) for an unattended daemon::

        [[unikraft]]            # or [unikraft] for one
        token = "..."
        metro = "fra"           # optional

    Refused unless it is a regular file of the daemon's user that group and others can
    neither read nor write. Errors name the file, never its content."""
    hint = f"chmod 600 {path} (a regular file owned by the daemon's user)"
    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise InvalidError(f"cannot open the credentials file {path}: {exc.strerror}", hint=hint) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InvalidError(f"the credentials file {path} is not a regular file", hint=hint)
        if st.st_mode & 0o077:
            raise InvalidError(
                f"the credentials file {path} is open to group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                "it must be readable by its owner only",
                hint=hint,
            )
        if st.st_uid != os.geteuid():
            raise InvalidError(f"the credentials file {path} belongs to uid {st.st_uid}, not to the daemon's user", hint=hint)
        raw = f.read(MAX_FILE + 1)
    if len(raw) > MAX_FILE:
        raise InvalidError(f"the credentials file {path} is larger than {MAX_FILE} bytes", hint="keep only the tokens there")
    import tomllib

    try:
        doc = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        raise InvalidError(f"the credentials file {path} is not valid TOML", hint='e.g. [unikraft] token = "..."') from None
    unknown = sorted(set(doc) - set(PROVIDERS))
    if unknown:
        raise InvalidError(f"the credentials file {path} names an unknown provider {unknown[0]!r}", hint="use [unikraft]")
    out: list[Credential] = []
    for name in PROVIDERS:
        entries = doc.get(name, [])
        entries = [entries] if isinstance(entries, dict) else entries
        if not isinstance(entries, list) or len(entries) > MAX_ENTRIES or not all(isinstance(e, dict) for e in entries):
            raise InvalidError(f"the credentials file {path}: [{name}] must be a table or up to {MAX_ENTRIES} tables", hint=hint)
        for entry in entries:
            extra = sorted(set(entry) - {"token", "metro"})
            if extra:
                raise InvalidError(f"the credentials file {path}: unknown key {extra[0]!r} in [{name}]", hint="token, metro")
            token = entry.get("token")
            if not isinstance(token, str) or not token.strip():
                raise InvalidError(f"the credentials file {path}: a [{name}] entry has no token", hint='token = "..."')
            metro = entry.get("metro", "")
            try:
                cred = Credential(name, _text(token, "token", MAX_TOKEN), "credentials file", _text(metro, "metro", 300))
            except InvalidError:
                raise InvalidError(f"the credentials file {path}: a [{name}] entry is not printable ASCII", hint=hint) from None
            out.append(cred)
    return out


MISSING = "missing: the daemon holds none for this account since it started"
BRING = "run any hutch command with the account's token set (e.g. UKC_TOKEN=... hutch list), or hutch serve --credentials-file"


def describe(info: Mapping[str, object]) -> str:
    """How ``hutch get`` and ``doctor`` say which credential an account has in memory."""
    if info.get("state") != "in_memory":
        return f"{MISSING} ({BRING})"
    origin, source = info.get("origin"), info.get("source")
    via = f"from {origin}" + (f", {source}" if source and source != origin else "")
    return f"in memory ({via}, token {info.get('fingerprint')})"


# -- registry logins (hutch image pull) ------------------------------------------------------

REGISTRY_HEADER = "x-hutch-registry-auth"
REGISTRY_USER_VAR = "HUTCH_REGISTRY_USER"
REGISTRY_PASSWORD_VAR = "HUTCH_REGISTRY_PASSWORD"
REGISTRY_VAR = "HUTCH_REGISTRY"  # optional: the registry (host[:port]) the two above are for
MAX_DOCKER_CONFIG = 1 << 20
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


class RegistryLogin:
    """A registry username and password (or identity token) of the caller, and where they were
    found (a value: equal by its fields); its repr shows only where."""

    __slots__ = ("password", "source", "username")

    def __init__(self, username: str = "", password: str = "", source: str = "") -> None:
        self.username, self.password, self.source = username, password, source

    def _fields(self) -> tuple[str, str, str]:
        return (self.username, self.password, self.source)

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if isinstance(other, RegistryLogin) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"RegistryLogin(source={self.source!r})"


def _docker_config(environ: Mapping[str, str]) -> dict[str, object]:
    base = environ.get("DOCKER_CONFIG") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".docker")
    try:
        with open(os.path.join(base, "config.json"), "rb") as f:
            raw = f.read(MAX_DOCKER_CONFIG + 1)
        doc = jsonwire.loads(raw) if len(raw) <= MAX_DOCKER_CONFIG else {}
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def registry_login(environ: Mapping[str, str], registry: str) -> RegistryLogin | None:
    """The caller's login for ``registry`` (``host[:port]``, ``docker.io`` for Docker Hub):
    ``HUTCH_REGISTRY_USER`` + ``HUTCH_REGISTRY_PASSWORD`` (for any registry, or the one
    ``HUTCH_REGISTRY`` names), else the ``auths`` entry of the docker config file
    (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``), whose ``credHelpers`` entry
    for the registry, else ``credsStore``, names a credential helper to ask first, as docker does
    (:mod:`hutch.credhelper`). None: pull anonymously."""
    user, password = environ.get(REGISTRY_USER_VAR, ""), environ.get(REGISTRY_PASSWORD_VAR, "")
    scope = environ.get(REGISTRY_VAR, "").strip()
    if user and password and (not scope or scope == registry):
        return RegistryLogin(user, password, f"{REGISTRY_USER_VAR}/{REGISTRY_PASSWORD_VAR}")
    config = _docker_config(environ)
    keys = DOCKER_HUB_KEYS if registry == "docker.io" else (registry, f"https://{registry}", f"http://{registry}")
    helpers, store = config.get("credHelpers"), config.get("credsStore")
    helper = next((helpers[k] for k in keys if isinstance(helpers, dict) and isinstance(helpers.get(k), str)), None)
    named = (helper, f"credHelpers entry for {registry}") if helper else (store, "credsStore") if store else None
    if named is not None:
        from hutch import credhelper  # here: only a config that names a helper pays for running one

        server = DOCKER_HUB_KEYS[0] if registry == "docker.io" else registry
        got = credhelper.get(environ, str(named[0]), server, named[1])
        if got is not None:
            return RegistryLogin(got[0], got[1], f"docker-credential-{named[0]}")
    auths = config.get("auths")
    if not isinstance(auths, dict):
        return None
    for key in keys:
        entry = auths.get(key) or auths.get(key.rstrip("/"))
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("identitytoken"), str) and entry["identitytoken"]:
            return RegistryLogin("<token>", entry["identitytoken"], "docker config file")
        user, password = str(entry.get("username") or ""), str(entry.get("password") or "")
        if not (user and password) and isinstance(entry.get("auth"), str):
            try:
                import base64

                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                continue
        if user and password:
            return RegistryLogin(user, password, "docker config file")
    return None


def encode_login(login: RegistryLogin) -> str:
    doc = {"username": login.username, "password": login.password, "source": login.source}
    return _pack(doc)


def decode_login(value: str) -> RegistryLogin:
    """The login a request carries in :data:`REGISTRY_HEADER`; bounded and strict (errors never quote it)."""
    hint = "the header is built by hutch's client; check the client's version"
    if len(value) > MAX_HEADER:
        raise InvalidError(f"the {REGISTRY_HEADER} header is longer than {MAX_HEADER} bytes", hint=hint)
    try:
        doc = _unpack(value)
    except (binascii.Error, ValueError):
        raise InvalidError(f"the {REGISTRY_HEADER} header is not base64url JSON", hint=hint) from None
    if not isinstance(doc, dict):
        raise InvalidError(f"the {REGISTRY_HEADER} header is not an object", hint=hint)
    login = RegistryLogin(
        _text(doc.get("username"), "username", MAX_TOKEN, REGISTRY_HEADER),
        _text(doc.get("password"), "password", MAX_TOKEN, REGISTRY_HEADER),
        _text(doc.get("source"), "source", 100, REGISTRY_HEADER),
    )
    if not login.username or not login.password:
        raise InvalidError(f"the {REGISTRY_HEADER} header has no username or password", hint=hint)
    return login


def _pack(doc: object) -> str:
    """A header value: base64url (unpadded) of compact JSON."""
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode().rstrip("=")


def _unpack(value: str) -> Any:
    """What :func:`_pack` made (binascii.Error or ValueError when it is not that)."""
    import base64

    return jsonwire.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
