"""Settings: flag > environment (``HUTCH_*``) > profile > config file > default.

The state directory comes from platformdirs (``/var/lib/hutch`` when running as root, so
that unprivileged sandbox users can be given their own directories beneath it), and
``HUTCH_HOME`` overrides it. The config file is ``$HUTCH_HOME/config.toml`` or
``HUTCH_CONFIG``; its ``[profiles.NAME]`` tables (selected with ``--profile`` or
``HUTCH_PROFILE``) override its top-level keys.
"""

from __future__ import annotations

import os
import sys

from hutch.errors import InvalidError, UnavailableError
from hutch.units import parse_size

# Every CLI call loads its settings: typing, collections and pathlib (with re) stay out of its
# start. ``home`` is kept as text (``home_dir``) and made a Path when something asks for it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

ENV_PREFIX = "HUTCH_"
CLUSTER_PROVIDER = "cluster"  # the provider of a cluster gateway (hutch serve --cluster)


def default_home() -> Path:
    from pathlib import Path

    return Path(default_home_dir())


def default_home_dir() -> str:
    """``/var/lib/hutch`` for root; else the user's state directory as platformdirs names it.
    On Linux with an absolute ``XDG_STATE_HOME`` (or none, and an absolute ``HOME``) that is
    ``$XDG_STATE_HOME/hutch`` (``~/.local/state/hutch``), said here without importing
    platformdirs (about 15 ms of every CLI call; tests/unit/test_cli_start.py compares them)."""
    if os.geteuid() == 0:
        return "/var/lib/hutch"
    if sys.platform.startswith("linux"):
        state, home = os.environ.get("XDG_STATE_HOME", ""), os.environ.get("HOME", "")
        if state.startswith("/"):
            return os.path.join(state, "hutch")
        if not state.strip() and home.startswith("/"):
            return os.path.join(home, ".local", "state", "hutch")
    from platformdirs import user_state_dir

    return user_state_dir("hutch", appauthor=False)


def absolute(path: str) -> str:
    """``Path(path).expanduser().absolute()`` as text, without pathlib: ``~`` expanded, relative
    to the working directory, empty and ``.`` parts dropped (``..`` kept, as pathlib keeps it)."""
    path = os.path.expanduser(path)
    if not path.startswith("/"):
        path = os.getcwd() + "/" + path
    lead = "//" if path.startswith("//") and not path.startswith("///") else "/"
    return lead + "/".join(part for part in path.split("/") if part not in ("", "."))


def home_problem(home: str) -> str | None:
    """Why this user cannot use ``home`` as the state directory (a file in its way, a directory
    it may not enter or write, nowhere to make it), or None. For messages: nothing calls it
    on a path that works."""
    path = absolute(home)
    here = ""
    for part in path.split("/")[1:]:
        parent, here = here or "/", here + "/" + part
        try:
            mode = os.stat(here).st_mode
        except FileNotFoundError:
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable by this user, so {path} cannot be made in it"
            return None
        except PermissionError:
            return f"this user may not enter {parent}"
        except OSError as exc:
            return f"{here}: {exc.strerror}"
        if mode & 0o170000 != 0o040000:  # not a directory
            return f"{here} is a file, not a directory" if here == path else f"{here} (in the path {path}) is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable by this user"
    return None


def unusable_home(home: object, exc: OSError) -> UnavailableError:
    """The error for a state directory this user cannot make or use, saying why."""
    why = home_problem(str(home)) or exc.strerror or str(exc)
    return UnavailableError(
        f"cannot use the state directory {home}: {why}",
        hint="set HUTCH_HOME to a directory this user can write (or unset it for the default)",
    )


class Settings:
    """Every setting: the class attributes are the defaults (``home``: :func:`default_home`).
    A plain class, not a dataclass: every CLI call builds one, and ``dataclasses`` (with
    ``inspect``) and the code it generates for sixty fields were a sixth of ``hutch exec``'s
    start. ``Settings(**values)`` takes known names only; :meth:`replace` copies with changes."""

    provider: str = "local"
    memory: str = "1G"
    pids: int = 512
    cpus: float | None = None
    output_cap: int = 1 << 20
    disk_cap: int = 64 << 20
    max_background_runs: int = 16
    uid_base: int = 600000
    uid_registry: str = ""  # root: the machine-wide registry of sandbox host uids ("": /var/lib/hutch/uids)
    image_host_ca: str = ""  # "": off; "system" or a bundle's path: every image sandbox trusts it (see --host-ca)
    daemon_start_timeout: float = 15.0
    exec_timeout: float = 3600.0
    egress_hosts: str = ""  # a hosts-format file the egress proxy consults before DNS
    egress_ca: str = ""  # "": the machine's trust store; else the CA bundle intercepted HTTPS upstreams are verified with
    subagent_depth: int = 2  # how deep sub-agents may nest (a sub-agent's sub-agent is depth 2)
    spare_idle: float = 60.0  # an idle sandbox's spare supervisor leaves after this (0: never); the next exec forks one
    idle_agent: str = "native"  # what holds a new local sandbox until its first run: native (hold.c, built here) or python
    pool_size: int = 2  # started sandboxes of the default shape kept for creates to take (0: no pool)
    reaper_interval: float = 1.0  # how often the daemon checks --ttl / --idle-timeout deadlines
    approval_timeout: float = 3600.0  # how long an approval request stays pending by default
    http_keepalive: float = 60.0  # the daemon closes an idle connection after this; clients reuse one for half of it
    header_timeout: float = 10.0  # the TCP listener closes a connection whose request head takes longer (slowloris)
    body_timeout: float = 60.0  # ... or whose request body stops arriving for this long (see body_min_rate)
    body_min_rate: int = 1024  # bytes a second a request body must average: one more second allowed per this many bytes
    max_connections: int = 1000  # the TCP listener answers 503 past this many open connections
    unikraft_image: str | None = None
    local_image: str | None = None  # the image of a local create without --image (none: the host-/usr sandbox)
    runtime: str = "bwrap"  # how a local sandbox isolates unless --runtime says: bwrap or gvisor
    gvisor_platform: str = "auto"  # runsc's platform: auto (kvm where it answers, else ptrace), ptrace, kvm, systrap
    manifest: str = ""  # a manifest file name create/run look for in the current directory ("": none), restricted
    insecure_registries: str = ""  # registries (host[:port], comma-separated) pulled from over plain http
    unikraft_ready_timeout: float = 60.0
    unikraft_timeout: float = 30.0
    unikraft_ca_file: str = ""  # a CA bundle for the TLS of `hutch ssh` only (tests: the test server's CA)
    unikraft_ssh_connect: str = ""  # HOST:PORT to dial for `hutch ssh` instead of the fqdn (SNI stays the fqdn)
    # hutch serve --credentials-file: an owner-only TOML file of provider tokens for an unattended daemon
    credentials_file: str = ""
    # the client's daemon: "" is the local unix socket; unix:///path, http://127.0.0.1:PORT, https://host:port
    host: str = ""
    token_file: str = ""  # the client's bearer token (or HUTCH_TOKEN, env only)
    ca_file: str = ""  # a CA bundle the client trusts for an https host
    cert_file: str = ""  # the client's certificate (PEM) for a gateway that takes client certificates (hutch login)
    key_file: str = ""  # ... and its private key (PEM, owner-only)
    # hutch serve --listen: a TCP listener next to the unix socket, with its token and TLS files
    listen: str = ""
    api_token_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    client_ca: str = ""  # the CA whose client certificates the TCP listener accepts ("": the gateway's own, when made)
    require_client_cert: bool = False  # refuse TCP requests without a client certificate
    public_url: str = ""  # the gateway's URL as clients see it (preview URLs); "": from hutch gateway init, or --listen
    preview_domain: str = ""  # a wildcard name (*.DOMAIN) routed to the gateway: previews at https://PORT-SANDBOX.DOMAIN/
    # hutch serve --cluster: this gateway places sandboxes on the nodes of the Ray cluster at this address
    cluster: str = ""
    cluster_placement: str = "spread"  # spread (the node with the most room) or pack (the fullest that fits)
    cluster_detect: float = 10.0  # seconds without an answer from a node's daemon before its sandboxes are lost
    cluster_node_sandboxes: int = 64  # sandboxes per node unless the node's Ray resource hutch_sandboxes says
    e2b_base_image: str = ""  # the image of E2B's `base` template ("": the host-/usr shape, which has /bin/bash)
    e2b_domain: str = ""  # E2B_DOMAIN mode: https://api.DOMAIN and https://PORT-ID.DOMAIN on the gateway (docs/e2b.md)
    profile: str = ""
    config_path: str = ""  # the config file that was read (or would have been)
    sources: dict[str, str]  # where each value came from (flag, env, profile NAME, file); {} by default

    def __init__(self, **values: Any) -> None:
        unknown = values.keys() - FIELDS
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        home = values.pop("home", None)
        self.__dict__.update(values)  # the rest are the class's defaults
        self.home_dir: str = default_home_dir() if home is None else os.fspath(home)
        if "sources" not in values:
            self.sources = {}

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (known names only), as ``dataclasses.replace`` made."""
        return Settings(**{name: getattr(self, name) for name in FIELDS} | changes)

    def __repr__(self) -> str:
        return f"Settings({', '.join(f'{name}={getattr(self, name)!r}' for name in FIELDS)})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def placed_by(self, provider: str) -> str:
        """The provider a create for ``provider`` goes to: on a cluster gateway, the ``local``
        sandboxes every client asks for by default live on its nodes (the ``cluster`` provider)."""
        return CLUSTER_PROVIDER if self.cluster and provider == "local" else provider

    def default_image(self, provider: str) -> str | None:
        """The image of a create without ``--image`` that the caller fills in (``local``); a
        provider that boots images (unikraft) picks its own default in the daemon."""
        return self.local_image or None if provider == "local" else None

    def default_runtime(self, provider: str) -> str | None:
        """The runtime of a create without ``--runtime`` (local only; the default, bwrap, is left unsaid)."""
        return self.runtime if provider == "local" and self.runtime != "bwrap" else None

    @property
    def home(self) -> Path:
        """The state directory (:func:`default_home` unless given)."""
        from pathlib import Path

        return Path(self.home_dir)

    @home.setter
    def home(self, value: str | os.PathLike[str]) -> None:
        self.home_dir = os.fspath(value)

    @property
    def socket_path(self) -> Path:
        return self.home / "hutchd.sock"

    @property
    def socket_file(self) -> str:
        """:attr:`socket_path` as text (what the CLI connects to, without pathlib)."""
        return os.path.join(self.home_dir, "hutchd.sock")

    @property
    def db_path(self) -> Path:
        return self.home / "hutch.db"

    @property
    def sandboxes_dir(self) -> Path:
        return self.home / "sandboxes"

    @property
    def log_path(self) -> Path:
        return self.home / "hutchd.log"

    @classmethod
    def load(cls, **flags: Any) -> Settings:
        """Resolve every setting; ``flags`` given as None are ignored."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        names = [name for name in FIELDS if name not in ("sources", "profile", "config_path")]
        home_env = os.environ.get(ENV_PREFIX + "HOME")
        home = os.fspath(flags.get("home") or home_env or default_home_dir())
        named = os.environ.get(ENV_PREFIX + "CONFIG")
        cfg_path = os.path.normpath(named) if named else os.path.join(home, "config.toml")
        if named and not os.path.isfile(cfg_path):
            raise InvalidError(
                f"HUTCH_CONFIG names {cfg_path}, which is not a file",
                hint=f"create {cfg_path}, or unset HUTCH_CONFIG to use {os.path.join(home, 'config.toml')}",
            )
        file_values: dict[str, Any] = {}
        if os.path.isfile(cfg_path):
            import tomllib  # here: most calls have no config file

            try:
                with open(cfg_path, encoding="utf-8") as f:
                    file_values = tomllib.loads(f.read())
            except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
                raise InvalidError(f"cannot read config file {cfg_path}: {exc}", hint="fix or remove the file") from exc
        profile = str(flags.get("profile") or os.environ.get(ENV_PREFIX + "PROFILE") or "")
        profile_values = _profile(file_values, profile, cfg_path)
        for name in names:
            env = os.environ.get(ENV_PREFIX + name.upper())
            if flags.get(name) is not None:
                values[name], sources[name] = flags[name], "flag"
            elif env not in (None, ""):
                values[name], sources[name] = env, "env"
            elif name in profile_values:
                values[name], sources[name] = profile_values[name], f"profile {profile}"
            elif name in file_values:
                values[name], sources[name] = file_values[name], "file"
        values["home"] = home
        settings = cls(**{k: v for k, v in values.items() if k in names})
        settings.sources = sources
        settings.profile = profile
        settings.config_path = cfg_path
        settings._coerce()
        return settings

    def _coerce(self) -> None:
        """Every setting to its type; one that does not convert is ``invalid``, naming the
        setting and where its value came from (``HUTCH_PIDS``, the config file ...)."""
        self.home_dir = absolute(self.home_dir)
        for name, (convert, expected) in COERCE.items():
            value = getattr(self, name)
            try:
                setattr(self, name, convert(value))
            except (TypeError, ValueError, InvalidError) as exc:
                where, fix = self._source(name, expected)
                reason = exc.message if isinstance(exc, InvalidError) else f"not {expected}"
                raise InvalidError(f"invalid setting {name}={value!r} ({where}): {reason}", hint=fix) from exc

    def _source(self, name: str, expected: str) -> tuple[str, str]:
        """Where the value of ``name`` came from, and how to fix it there."""
        source = self.sources.get(name, "default")
        var = ENV_PREFIX + name.upper()
        if source == "env":
            return f"from {var}", f"set {var} to {expected}, or unset it"
        if source in ("flag", "default"):
            return ("from the command line" if source == "flag" else "as given"), f"give {expected}"
        table = "" if source == "file" else f"[{source.replace('profile ', 'profiles.')}] of "
        return f"from {table}{self.config_path}", f"set {name} in {table}{self.config_path} to {expected}, or remove it"


FIELDS = ("home", *Settings.__annotations__)  # every setting, in the order of the class


def _optional_float(value: Any) -> float | None:
    return float(value) if value is not None and str(value) != "" else None


def _size_text(value: Any) -> str:
    parse_size(value)  # the daemon reads it; here it is only checked
    return str(value)


def _text(value: Any) -> str:
    return str(value or "")


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _positive_int(value: Any) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(number)
    return number


def _placement(value: Any) -> str:
    if str(value) not in ("spread", "pack"):
        raise ValueError(value)
    return str(value)


def _detect(value: Any) -> float:
    seconds = float(value)
    if not 0.5 <= seconds <= 3600:
        raise ValueError(seconds)
    return seconds


def _choice(*allowed: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in allowed:
            raise ValueError(value)
        return text

    return convert


def _keepalive(value: Any) -> float:
    seconds = float(value)
    if not 0 < seconds <= 3600:
        raise ValueError(seconds)
    return seconds


# each setting's conversion, and what a good value looks like (for the error)
COERCE: dict[str, tuple[Callable[[Any], Any], str]] = {
    "memory": (_size_text, "a size such as 512M or 1G"),
    "pids": (int, "a whole number such as 512"),
    "cpus": (_optional_float, "a number of cores such as 0.5"),
    "output_cap": (parse_size, "a size such as 1M"),
    "disk_cap": (parse_size, "a size such as 64M"),
    "max_background_runs": (int, "a whole number such as 16"),
    "uid_base": (int, "a whole number such as 600000"),
    "daemon_start_timeout": (float, "a number of seconds such as 15"),
    "exec_timeout": (float, "a number of seconds such as 3600"),
    "egress_hosts": (_text, "a file path"),
    "egress_ca": (_text, "the path of a CA bundle"),
    "subagent_depth": (int, "a whole number such as 2"),
    "pool_size": (int, "a whole number such as 2 (0 turns the pool off)"),
    "spare_idle": (float, "a number of seconds such as 60 (0: the spare never leaves)"),
    "idle_agent": (_choice("native", "python"), "native or python"),
    "reaper_interval": (float, "a number of seconds such as 1"),
    "approval_timeout": (float, "a number of seconds such as 3600"),
    "http_keepalive": (_keepalive, "a number of seconds from 0 (exclusive) to 3600, such as 60"),
    "header_timeout": (_keepalive, "a number of seconds from 0 (exclusive) to 3600, such as 10"),
    "body_timeout": (_keepalive, "a number of seconds from 0 (exclusive) to 3600, such as 60"),
    "body_min_rate": (_positive_int, "a whole number of bytes a second from 1, such as 1024"),
    "max_connections": (_positive_int, "a whole number from 1, such as 1000"),
    "unikraft_ready_timeout": (float, "a number of seconds such as 60"),
    "unikraft_timeout": (float, "a number of seconds such as 30"),
    "cluster_placement": (_placement, "spread or pack"),
    "cluster_detect": (_detect, "a number of seconds from 0.5 to 3600, such as 10"),
    "cluster_node_sandboxes": (int, "a whole number such as 64"),
    **dict.fromkeys(
        (
            "host",
            "token_file",
            "ca_file",
            "listen",
            "api_token_file",
            "tls_cert",
            "tls_key",
            "cert_file",
            "key_file",
            "client_ca",
            "public_url",
            "preview_domain",
            "unikraft_ca_file",
            "unikraft_ssh_connect",
            "credentials_file",
            "e2b_base_image",
            "e2b_domain",
            "cluster",
            "manifest",
        ),
        (_text, "text"),
    ),
    "uid_registry": (_text, "a directory path"),
    "image_host_ca": (_text, "system, or the path of a CA bundle"),
    "require_client_cert": (_bool, "true or false"),
    "runtime": (_choice("bwrap", "gvisor"), "bwrap or gvisor"),
    "gvisor_platform": (_choice("auto", "ptrace", "kvm", "systrap"), "auto, ptrace, kvm or systrap"),
}


def _profile(file_values: dict[str, Any], name: str, cfg_path: str) -> dict[str, Any]:
    """The ``[profiles.NAME]`` table of the config file ({} without a profile)."""
    profiles = file_values.get("profiles", {})
    if not isinstance(profiles, dict):
        raise InvalidError(f"{cfg_path}: profiles must be a table", hint="use [profiles.NAME] tables")
    if not name:
        return {}
    table = profiles.get(name)
    if not isinstance(table, dict):
        known = ", ".join(sorted(profiles)) or "none"
        raise InvalidError(
            f"unknown profile {name!r} (known: {known})", hint=f"add a [profiles.{name}] table to {cfg_path}, or pick a known one"
        )
    return table
