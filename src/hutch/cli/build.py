"""hutch image build: an image made in a throwaway sandbox (docs/images.md, "Templates: commit and build").

Composed on the client from calls every client has (create, write_file, exec, image_commit,
destroy), so it works through a remote daemon too. The steps (``--copy``, ``--run``, ``--env``,
``--workdir``) run in the order they are given on the command line: :class:`BuildCommand` keeps
the order click's parser saw the options in and pairs it with each option's values.
"""

from __future__ import annotations

import base64
import collections
import os
import shlex
import stat
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, cast

import click

from hutch.cli.benchmark import _shielded, _sigterm_raises
from hutch.cli.common import Ctx, Duration, emit, human_bytes, json_option, usage_error
from hutch.cli.imageconfig import changes, config_options
from hutch.cli.network import network_options, resolve_secrets
from hutch.errors import ConflictError, HutchError, InvalidError
from hutch.wire.build import sandbox_spec

if TYPE_CHECKING:
    from hutch import wire
    from hutch.client import Client

STEP_OPTIONS = ("run", "copy", "env", "workdir")
TAIL_LINES = 20
MAX_COPY_FILE = 64 << 20  # what one file write carries (the daemon's limit)


@dataclass(frozen=True)
class Step:
    kind: str  # run, copy, env, workdir
    value: str

    def show(self) -> str:
        return f"--{self.kind} {shlex.quote(self.value)}"


class BuildCommand(click.Command):
    """Remembers the order the step options came in (click's parser reports it, one entry per
    occurrence) so the steps run in command-line order."""

    def make_parser(self, ctx: click.Context) -> Any:
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_args(args: list[str]) -> Any:
            opts, rest, order = parse(args=args)
            ctx.meta["hutch.build.order"] = [p.name for p in order if p.name in STEP_OPTIONS]
            return opts, rest, order

        parser.parse_args = parse_args  # type: ignore[method-assign]
        return parser


def ordered_steps(ctx: click.Context, values: dict[str, tuple[str, ...]]) -> list[Step]:
    """The steps in command-line order: the order of the options, each taking its next value."""
    queues = {kind: list(values[kind]) for kind in STEP_OPTIONS}
    return [Step(kind, queues[kind].pop(0)) for kind in ctx.meta.get("hutch.build.order", [])]


@click.command("build", cls=BuildCommand)
@click.option("--from", "base", required=True, metavar="REF", help="The image to start from (one of hutch image list).")
@click.option("--run", multiple=True, metavar="CMD", help="Run CMD under /bin/sh -c in the build sandbox (repeatable).")
@click.option(
    "--copy",
    multiple=True,
    metavar="SRC:DST",
    help="Copy a file or directory of this machine into the image at DST (repeatable; DST/ keeps a file's name).",
)
@click.option("--env", "-e", multiple=True, metavar="K=V", help="Set a variable in the image and for later --run steps.")
@click.option("--workdir", multiple=True, metavar="DIR", help="The image's working directory (created), and later --run steps'.")
@click.option("--tag", "-t", required=True, metavar="NAME[:TAG]", help="The new image's name.")
@config_options
@click.option(
    "--timeout", type=Duration(), metavar="DURATION", help="Each --run step's limit (e.g. 10m): past it, the step fails."
)
@click.option("--host-ca", is_flag=True, help="Trust this machine's CA bundle in the build sandbox (as hutch create --host-ca).")
@network_options
@json_option
@click.pass_context
def build(
    ctx: click.Context,
    /,
    base: str,
    tag: str,
    cmd: str | None,
    entrypoint: str | None,
    user: str | None,
    timeout: float | None,
    host_ca: bool,
    network: str | None,
    allow_hosts: tuple[str, ...],
    allow_ports: tuple[int, ...],
    allow_cidrs: tuple[str, ...],
    secrets: tuple[str, ...],
    **values: Any,
) -> None:
    """Build the image NAME[:TAG] from REF in a throwaway sandbox.

    The steps run in the order given: --copy uploads a file or directory from this machine,
    --run runs a command (a failure stops the build with its exit code and the end of its
    output), --env and --workdir set the image's config and apply to the --run steps after them.
    --cmd, --entrypoint and --user set the new image's CMD, ENTRYPOINT and USER (the steps run
    as the build sandbox's user: its image's USER, root when it has none). Each --run step's
    output is shown as it runs; --timeout bounds each one.
    The sandbox has the network policy given (--network, --allow-host ...; default none) and is
    destroyed at the end, also on failure or Ctrl-C; the image is committed only if every step
    succeeded. Progress goes to stderr; the new image's id (--json: its record) to stdout.
    """
    obj: Ctx = ctx.obj
    config = changes(cmd, entrypoint, user)
    steps = ordered_steps(ctx, values)
    for step in steps:  # bad input fails before any sandbox is made
        if step.kind == "copy":
            _copy_parts(step.value)
    env_pairs = [s.value for s in steps if s.kind == "env"]
    for pair in env_pairs:
        if not pair.partition("=")[0] or "=" not in pair:
            usage_error(f"invalid --env {pair!r}", "use --env NAME=VALUE", ctx=ctx)
    spec = sandbox_spec(
        obj.settings,
        name=None,
        provider=None,
        image=base,
        network=network,
        allow_hosts=allow_hosts,
        allow_ports=allow_ports,
        allow_cidrs=allow_cidrs,
        secrets=resolve_secrets(secrets),
        labels={"hutch.build": tag},
        host_ca=host_ca,
    )
    started = time.monotonic()
    done = Builder(obj.client, steps, tag, quiet=obj.json, config=config, timeout=timeout).build(spec)
    image = done["image"]
    if obj.json:
        emit(image)
        return
    names = ", ".join(image["names"]) or "(no name)"
    layer = done["layer"]
    click.echo(
        f"built {names}: {image['id'][7:19]} (a layer of {layer['entries']} entries, {human_bytes(layer['size'])}, "
        f"{time.monotonic() - started:.1f}s)",
        err=True,
    )
    click.echo(image["id"])


def _copy_parts(value: str) -> tuple[Path, str]:
    src, sep, dst = value.rpartition(":")
    if not sep or not src or not dst:
        raise InvalidError(f"invalid --copy {value!r}", hint="use --copy SRC:DST, e.g. --copy ./app:/opt/app")
    path = Path(src).expanduser()
    if not path.exists() and not path.is_symlink():
        raise InvalidError(f"--copy {value!r}: {src} does not exist on this machine", hint="give a file or directory here")
    return path, dst


class Builder:
    """One build: the sandbox, the steps, the commit; the sandbox destroyed whatever happens."""

    def __init__(
        self,
        client: Client,
        steps: list[Step],
        tag: str,
        *,
        quiet: bool,
        config: wire.CommitChanges | None = None,
        timeout: float | None = None,
    ) -> None:
        self.client = client
        self.steps = steps
        self.tag = tag
        self.quiet = quiet
        self.config: wire.CommitChanges = config or {}
        self.timeout = timeout
        self.env: dict[str, str] = {}
        self.workdir: str | None = None

    def say(self, line: str) -> None:
        click.echo(f"hutch: {line}", err=True)

    def build(self, spec: wire.SandboxSpec) -> wire.ImageCommitted:
        sandbox: str | None = None
        try:
            with _sigterm_raises():
                rec = self.client.create(spec)
                sandbox = rec["id"]
                self.say(f"build sandbox {sandbox} from {spec.get('image')}")
                for n, step in enumerate(self.steps, 1):
                    self.say(f"step {n}/{len(self.steps)}: {step.show()}")
                    getattr(self, "do_" + step.kind)(sandbox, n, step)
                changes: wire.CommitChanges = dict(self.config)  # type: ignore[assignment]
                if self.env:
                    changes["env"] = [f"{k}={v}" for k, v in self.env.items()]
                if self.workdir:
                    changes["workdir"] = self.workdir
                self.say(f"committing {self.tag}")
                history = "hutch image build " + " ".join(s.show() for s in self.steps)
                return self.client.image_commit(sandbox, self.tag, changes=changes, comment=history[:4096])
        finally:
            if sandbox is not None:
                with _shielded():
                    try:
                        self.client.destroy(sandbox)
                        self.say(f"build sandbox {sandbox} destroyed")
                    except HutchError as exc:
                        self.say(f"could not destroy the build sandbox {sandbox}: {exc.message} (hutch destroy {sandbox})")

    # -- the steps ------------------------------------------------------------------------
    def do_env(self, sandbox: str, n: int, step: Step) -> None:
        key, _, value = step.value.partition("=")
        self.env[key] = value

    def do_workdir(self, sandbox: str, n: int, step: Step) -> None:
        self.workdir = self._absolute(step.value, "--workdir")
        self._exec(sandbox, n, step, ["mkdir", "-p", "--", self.workdir], cwd="/")

    def do_run(self, sandbox: str, n: int, step: Step) -> None:
        self._exec(sandbox, n, step, step.value, cwd=self.workdir)

    def do_copy(self, sandbox: str, n: int, step: Step) -> None:
        src, given = _copy_parts(step.value)
        dst = self._absolute(given, "--copy destination")
        if src.is_dir() and not src.is_symlink():
            self._copy_tree(sandbox, n, step, src, dst)
            return
        target = str(PurePosixPath(dst) / src.name) if given.endswith("/") else dst
        if src.is_symlink():
            self._exec(sandbox, n, step, ["ln", "-sfn", "--", os.readlink(src), target], cwd="/")
        else:
            self._write(sandbox, src, target)

    def _copy_tree(self, sandbox: str, n: int, step: Step, src: Path, dst: str) -> None:
        dirs, links, files, size = [dst], [], 0, 0
        for root, subdirs, names in os.walk(src):
            rel = PurePosixPath(dst) / Path(root).relative_to(src).as_posix()
            for name in subdirs:
                if (Path(root) / name).is_symlink():
                    links.append((os.readlink(Path(root) / name), str(rel / name)))
                else:
                    dirs.append(str(rel / name))
            for name in names:
                path = Path(root) / name
                if path.is_symlink():
                    links.append((os.readlink(path), str(rel / name)))
                elif path.is_file():
                    size += self._write(sandbox, path, str(rel / name))
                    files += 1
        script = "mkdir -p -- " + " ".join(shlex.quote(d) for d in dirs)
        for target, link in links:
            script += f" && ln -sfn -- {shlex.quote(target)} {shlex.quote(link)}"
        self._exec(sandbox, n, step, script, cwd="/")
        self.say(f"  copied {files} files, {len(links)} links ({human_bytes(size)}) to {dst}")

    def _write(self, sandbox: str, src: Path, target: str) -> int:
        st = src.stat()
        if st.st_size > MAX_COPY_FILE:
            raise InvalidError(
                f"--copy: {src} is {human_bytes(st.st_size)}; one file can be at most {human_bytes(MAX_COPY_FILE)}",
                hint="split it, or fetch it with a --run step (with the network it needs)",
            )
        self.client.write_file(sandbox, target, src.read_bytes(), stat.S_IMODE(st.st_mode))
        return st.st_size

    def _absolute(self, path: str, what: str) -> str:
        if not path.startswith("/"):
            if self.workdir is None:
                raise InvalidError(f"{what} {path!r} is relative", hint="give an absolute path, or a --workdir before it")
            path = str(PurePosixPath(self.workdir) / path)
        path = str(PurePosixPath(path))  # no trailing slash, no //
        if path == "/workspace" or path.startswith("/workspace/"):
            raise InvalidError(
                f"{what} {path} is under /workspace, which is not part of an image", hint="use another directory, e.g. /app"
            )
        return path

    def _exec(self, sandbox: str, n: int, step: Step, command: str | list[str], cwd: str | None) -> None:
        """Run a step's command, its output shown line by line as it comes (a --run step's)."""
        req: wire.ExecRequest = {"command": command, "env": dict(self.env)}
        if cwd:
            req["cwd"] = cwd
        if self.timeout and step.kind == "run":
            req["timeout"] = self.timeout
        show = not self.quiet and step.kind == "run"
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        partial = {"stdout": "", "stderr": ""}
        code: int | None = None
        for frame in self.client.exec_stream(sandbox, req):
            kind = frame["type"]
            if kind in ("stdout", "stderr"):
                data = frame["data"]  # type: ignore[typeddict-item]
                text = base64.b64decode(data).decode(errors="replace") if frame.get("base64") else data
                lines = (partial[kind] + text).split("\n")
                partial[kind] = lines.pop()  # a line still being written
                for line in lines:
                    tail.append(line)
                    if show:
                        click.echo(f"  | {line}", err=True)
            elif kind == "exit":
                code = frame["exit_code"]  # type: ignore[typeddict-item]
            elif kind == "error":
                err = cast("dict[str, Any]", frame.get("error") or {})
                raise ConflictError(f"step {n} ({step.show()}) failed: {err.get('message')}", hint=str(err.get("hint") or ""))
        for rest in partial.values():
            if rest:
                tail.append(rest)
                if show:
                    click.echo(f"  | {rest}", err=True)
        if code != 0:
            shown = "\n".join(tail)
            why = f"was stopped at its --timeout of {self.timeout:g}s" if code == 124 and "timeout" in req else None
            raise ConflictError(
                f"step {n} ({step.show()}) "
                + (why or f"failed with exit code {code}")
                + (f"; the end of its output:\n{shown}" if shown else " and no output"),
                hint="no image was made and the build sandbox is destroyed; fix the step and build again",
            )


def _tail(text: str, lines: int) -> list[str]:
    return text.rstrip("\n").splitlines()[-lines:] if text.strip() else []
