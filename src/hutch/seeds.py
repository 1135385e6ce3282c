"""What a new sandbox starts with besides its root: files to seed, setup commands run once,
and the repository its /workspace is cloned from. Validated here (the daemon's side); done
by :mod:`hutch.service.provision` right after the sandbox starts."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from hutch.checks import MAX_ENV_NAME, check_command, check_count, check_mode, check_path
from hutch.errors import InvalidError
from hutch.units import format_size, parse_size

MAX_SEED_FILES = 256
MAX_SEED_BYTES = 1 << 20  # all seeded files together (they are kept in the record: a manifest of the sandbox names them)
MAX_SETUP = 64  # setup commands
MAX_GIT_SIZE = 64 << 30
DEFAULT_GIT_SIZE = 1 << 30
SETUP_TIMEOUT = 3600.0  # seconds per setup command
SECRET_SOURCE_HINT = "give where the value is read: env:VAR or file:PATH, never the value"


class SeedFile(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    content: str = Field(description="base64 of the file's bytes")
    mode: int = 0o644

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v:
            raise InvalidError("a seeded file needs a path", hint="e.g. path = '/workspace/.env'")
        return check_path(v, "seeded file")

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: Any) -> int:
        return check_mode(v)

    def data(self) -> bytes:
        try:
            return base64.b64decode(self.content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidError(f"seeded file {self.path}: content is not base64", hint="send base64 of its bytes") from exc


class GitSource(BaseModel):
    model_config = ConfigDict(frozen=True)
    url: str
    ref: str | None = None
    depth: int | None = Field(default=1, ge=1, le=1 << 20)
    secret: str | None = None
    username: str | None = None
    max_size: Annotated[int | None, WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]})] = (
        Field(default=None, description="bytes (or a size with a unit); default 1G")
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        from hutch.wire.build import check_git_url

        check_path(v, "git URL")
        if not v.startswith("file:///"):
            check_git_url(v)  # the edges refuse it already; a request made by hand too
        return v

    @field_validator("ref")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        if v is not None and (not v or v.startswith("-") or any(c in v for c in " \t\n~^:?*[\\") or ".." in v):
            raise InvalidError(f"invalid git ref {v!r}", hint="a branch, a tag or a commit id, e.g. #main or #v1.2")
        return v

    @field_validator("secret", "username")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and (not v or len(v) > MAX_ENV_NAME or "\n" in v or "\0" in v):
            raise InvalidError(f"invalid git secret or user name {v!r}")
        return v

    @field_validator("max_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int | None:
        if v is None:
            return None
        size = parse_size(v)
        if not 1 <= size <= MAX_GIT_SIZE:
            raise InvalidError(f"git max_size must be at most {format_size(MAX_GIT_SIZE)}", hint="e.g. max_size = '2G'")
        return size

    @property
    def local(self) -> bool:
        return self.url.startswith("file://")

    @property
    def cap(self) -> int:
        return self.max_size or DEFAULT_GIT_SIZE


def check_seeds(files: list[SeedFile], setup: list[list[str] | str], sources: dict[str, str]) -> None:
    check_count(files, MAX_SEED_FILES, "seeded files")
    total = sum(len(f.content) * 3 // 4 for f in files)
    if total > MAX_SEED_BYTES:
        raise InvalidError(
            f"seeded files hold {format_size(total)}; the limit is {format_size(MAX_SEED_BYTES)}",
            hint="seed large trees with --git-repo, or push them after create (hutch push)",
        )
    check_count(setup, MAX_SETUP, "setup commands")
    for command in setup:
        if not command:
            raise InvalidError("an empty setup command", hint="drop it")
        check_command(command)
    for name, source in sources.items():
        kind, _, where = source.partition(":")
        if kind not in ("env", "file") or not where:
            raise InvalidError(f"secret {name}: its source is not a reference", hint=SECRET_SOURCE_HINT)
