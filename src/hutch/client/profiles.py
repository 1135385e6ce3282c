"""``hutch login BUNDLE``: a profile bundle (``hutch gateway issue``) becomes a
``[profiles.NAME]`` table of config.toml and three owner-only files beside it.

The files go to ``$HUTCH_HOME/profiles/NAME/`` (ca.pem, cert.pem, key.pem; the directory
0700, the key 0600); the table names them with the gateway's URL (``host``, ``ca_file``,
``cert_file``, ``key_file``), which is all ``hutch --profile NAME`` needs.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from hutch import pki
from hutch.config import Settings
from hutch.errors import ConflictError, InvalidError

MAX_BUNDLE = 1 << 20


def _write(path: Path, data: str, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _without_table(text: str, name: str) -> str:
    """``text`` without its ``[profiles.NAME]`` table (from its header to the next header)."""
    out: list[str] = []
    skipping = False
    header = re.compile(r"^\s*\[")
    mine = re.compile(r"^\s*\[\s*profiles\s*\.\s*(\"?)" + re.escape(name) + r"\1\s*\]\s*(#.*)?$")
    for line in text.splitlines(keepends=True):
        if header.match(line):
            skipping = bool(mine.match(line))
        if not skipping:
            out.append(line)
    return "".join(out)


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def login(
    settings: Settings, bundle_path: str, name: str | None = None, key_file: str | None = None, force: bool = False
) -> dict[str, Any]:
    path = Path(bundle_path).expanduser()
    try:
        if path.stat().st_size > MAX_BUNDLE:
            raise InvalidError(f"{path} is too large for a profile bundle", hint="use the file hutch gateway issue wrote")
        text = path.read_text()
    except OSError as exc:
        raise InvalidError(
            f"cannot read the bundle {path}: {exc.strerror}", hint="give the path of the file hutch gateway issue wrote"
        ) from None
    doc = pki.read_bundle(text)
    profile = pki.check_name(name or doc["name"], "profile name")
    if key_file:
        try:
            key = Path(key_file).expanduser().read_text()
        except OSError as exc:
            raise InvalidError(
                f"cannot read --key-file {key_file}: {exc.strerror}", hint="the private key you made the CSR with"
            ) from None
    elif "key" in doc:
        key = str(doc["key"])
    else:
        raise InvalidError(
            "the bundle carries no private key (it was issued for a CSR)",
            hint="pass --key-file with the key you made the CSR with",
        )
    cfg = Path(settings.config_path)
    current = cfg.read_text() if cfg.is_file() else ""
    try:
        known = tomllib.loads(current).get("profiles", {})
    except tomllib.TOMLDecodeError as exc:
        raise InvalidError(f"cannot read config file {cfg}: {exc}", hint="fix or remove the file") from None
    if profile in known and not force:
        raise ConflictError(f"profile {profile!r} already exists in {cfg}", hint="pass --force to replace it, or --name another")
    home = settings.home / "profiles" / profile
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(home.parent, 0o700)
    os.chmod(home, 0o700)
    files = {"ca_file": home / "ca.pem", "cert_file": home / "cert.pem", "key_file": home / "key.pem"}
    _write(files["ca_file"], doc["ca"], 0o600)
    _write(files["cert_file"], doc["cert"], 0o600)
    _write(files["key_file"], key, 0o600)
    key = profile if re.fullmatch(r"[A-Za-z0-9_-]+", profile) else _toml_str(profile)
    table = f"[profiles.{key}]\nhost = {_toml_str(doc['url'])}\n"
    table += "".join(f"{k} = {_toml_str(str(v))}\n" for k, v in files.items())
    body = _without_table(current, profile).rstrip("\n")
    cfg.parent.mkdir(parents=True, exist_ok=True)
    _write(cfg, (body + "\n\n" if body else "") + table, 0o600)
    return {"profile": profile, "url": doc["url"], "config": str(cfg), "files": {k: str(v) for k, v in files.items()}}
