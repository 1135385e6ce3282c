"""Settings: flag > environment (``HUTCH_*``) > profile > config file > default.

The state directory comes from platformdirs (``/var/lib/hutch`` when running as root, so
that unprivileged sandbox users can be given their own directories beneath it), and
``HUTCH_HOME`` overrides it. The config file is ``$HUTCH_HOME/config.toml`` or
``HUTCH_CONFIG``; its ``[profiles.NAME]`` tables (selected with ``--profile`` or
``HUTCH_PROFILE``) override its top-level keys.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hutch.errors import InvalidError
from hutch.units import parse_size

ENV_PREFIX = "HUTCH_"


def default_home() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/hutch")
    from platformdirs import user_state_path

    return user_state_path("hutch", appauthor=False)


@dataclass
class Settings:
    home: Path = field(default_factory=default_home)
    provider: str = "local"
    memory: str = "1G"
    pids: int = 512
    cpus: float | None = None
    output_cap: int = 1 << 20
    disk_cap: int = 64 << 20
    max_background_runs: int = 16
    uid_base: int = 600000
    daemon_start_timeout: float = 15.0
    exec_timeout: float = 3600.0
    egress_hosts: str = ""  # a hosts-format file the egress proxy consults before DNS
    subagent_depth: int = 2  # how deep sub-agents may nest (a sub-agent's sub-agent is depth 2)
    reaper_interval: float = 1.0  # how often the daemon checks --ttl / --idle-timeout deadlines
    approval_timeout: float = 3600.0  # how long an approval request stays pending by default
    http_keepalive: float = 60.0  # the daemon closes an idle connection after this; clients reuse one for half of it
    unikraft_image: str | None = None
    unikraft_ready_timeout: float = 60.0
    unikraft_timeout: float = 30.0
    unikraft_ca_file: str = ""  # a CA bundle for the TLS of `hutch ssh` only (tests: the test server's CA)
    unikraft_ssh_connect: str = ""  # HOST:PORT to dial for `hutch ssh` instead of the fqdn (SNI stays the fqdn)
    # the client's daemon: "" is the local unix socket; unix:///path, http://127.0.0.1:PORT, https://host:port
    host: str = ""
    token_file: str = ""  # the client's bearer token (or HUTCH_TOKEN, env only)
    ca_file: str = ""  # a CA bundle the client trusts for an https host
    # hutch serve --listen: a TCP listener next to the unix socket, with its token and TLS files
    listen: str = ""
    api_token_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    profile: str = ""
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def socket_path(self) -> Path:
        return self.home / "hutchd.sock"

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
        names = [f.name for f in fields(cls) if f.name not in ("sources", "profile")]
        home_env = os.environ.get(ENV_PREFIX + "HOME")
        home = Path(flags.get("home") or home_env or default_home())
        cfg_path = Path(os.environ.get(ENV_PREFIX + "CONFIG") or home / "config.toml")
        file_values: dict[str, Any] = {}
        if cfg_path.is_file():
            try:
                file_values = tomllib.loads(cfg_path.read_text())
            except (tomllib.TOMLDecodeError, OSError) as exc:
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
        settings._coerce()
        return settings

    def _coerce(self) -> None:
        try:
            self.home = Path(self.home).expanduser().absolute()
            self.pids = int(self.pids)
            self.cpus = float(self.cpus) if self.cpus is not None and str(self.cpus) != "" else None
            self.output_cap = parse_size(self.output_cap)
            self.disk_cap = parse_size(self.disk_cap)
            self.max_background_runs = int(self.max_background_runs)
            self.uid_base = int(self.uid_base)
            self.daemon_start_timeout = float(self.daemon_start_timeout)
            self.exec_timeout = float(self.exec_timeout)
            self.egress_hosts = str(self.egress_hosts or "")
            self.subagent_depth = int(self.subagent_depth)
            self.reaper_interval = float(self.reaper_interval)
            self.approval_timeout = float(self.approval_timeout)
            self.http_keepalive = float(self.http_keepalive)
            if not 0 < self.http_keepalive <= 3600:
                raise ValueError(f"http_keepalive must be between 0 and 3600 seconds, not {self.http_keepalive}")
            self.unikraft_ready_timeout = float(self.unikraft_ready_timeout)
            self.unikraft_timeout = float(self.unikraft_timeout)
            for name in (
                "host",
                "token_file",
                "ca_file",
                "listen",
                "api_token_file",
                "tls_cert",
                "tls_key",
                "unikraft_ca_file",
                "unikraft_ssh_connect",
            ):
                setattr(self, name, str(getattr(self, name) or ""))
        except (TypeError, ValueError, InvalidError) as exc:
            raise InvalidError(f"invalid setting: {exc}", hint="check HUTCH_* variables and config.toml") from exc


def _profile(file_values: dict[str, Any], name: str, cfg_path: Path) -> dict[str, Any]:
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
