"""What a new sandbox starts with besides its root, done once, right after it starts: the
workspace cloned from a repository, files seeded, setup commands run, in that order.

A local repository (``file://``) is cloned on this host and pushed in through the
provider's workspace import; any other URL is cloned inside the sandbox, through its egress
proxy, with the repository's host allowed for the clone only (``git_clone_started`` says so;
the policy is put back after). A token comes from one of the sandbox's secrets and reaches
git through a credential helper reading an environment variable: never argv, never
``.git/config``, never an event. A token that is a placeholder secret (``--secret-host``
bound to the repository's host) reaches git as its placeholder only: the egress proxy puts
the value into git's Basic credentials toward that host, so the sandbox never holds it.
Both clones run under one shell script that watches the clone's size and stops it past the cap.

Anything that fails destroys the sandbox (no half-made sandbox is left) and the error says
what git or the command said.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hutch.errors import HutchError, InvalidError, UnavailableError
from hutch.models import RawOutput, SandboxRecord, SandboxSpec, new_id
from hutch.netpolicy import NetworkPolicy, host_matches
from hutch.provider import ExecSpec, network_provider, transfer_provider
from hutch.seeds import SETUP_TIMEOUT, GitSource
from hutch.units import format_size

if TYPE_CHECKING:
    from hutch.service import Service

WORKSPACE = "/workspace"
TAIL = 4000  # characters of a command's output kept in its event and in an error
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
CLONE_TIMEOUT = 1800.0
OVER_CAP = 90  # the script's exit code when the clone passed its size cap
NO_GIT = 91

# $1: the size cap in KiB. Env: HUTCH_GIT_URL, _REF (a branch or tag), _COMMIT (a commit id),
# _DEPTH (--depth=N or empty), _USER and _PASSWORD (the credential helper's answer).
CLONE = r"""
command -v git >/dev/null 2>&1 || { echo "git: command not found" >&2; exit 91; }
helper='!f() { test "$1" = get && printf "username=%s\npassword=%s\n" "$HUTCH_GIT_USER" "$HUTCH_GIT_PASSWORD"; }; f'
cap=$1
set -- -c credential.helper= -c "credential.helper=$helper" -c advice.detachedHead=false
export GIT_TERMINAL_PROMPT=0
if [ -n "$HUTCH_GIT_COMMIT" ]; then
    ( git init -q . && git remote add origin "$HUTCH_GIT_URL" \
      && git "$@" fetch -q $HUTCH_GIT_DEPTH origin "$HUTCH_GIT_COMMIT" && git checkout -q FETCH_HEAD ) &
else
    git "$@" clone -q $HUTCH_GIT_DEPTH ${HUTCH_GIT_REF:+--branch "$HUTCH_GIT_REF"} -- "$HUTCH_GIT_URL" . &
fi
pid=$!
while kill -0 $pid 2>/dev/null; do
    used=$(du -sk . 2>/dev/null | cut -f1)
    if [ "${used:-0}" -gt "$cap" ]; then
        kill $pid 2>/dev/null; wait $pid; exit 90
    fi
    sleep 0.2
done
wait $pid || exit $?
used=$(du -sk . 2>/dev/null | cut -f1)
[ "${used:-0}" -gt "$cap" ] && exit 90
echo "commit=$(git rev-parse HEAD)"
echo "kib=$used"
"""


def _tail(data: bytes) -> str:
    text = data.decode(errors="replace").strip()
    return text if len(text) <= TAIL else "..." + text[-TAIL:]


def _clone_env(git: GitSource, password: str | None) -> dict[str, str]:
    ref = git.ref or ""
    commit = ref if COMMIT.fullmatch(ref) else ""
    return {
        "HUTCH_GIT_URL": git.url,
        "HUTCH_GIT_REF": "" if commit else ref,
        "HUTCH_GIT_COMMIT": commit,
        "HUTCH_GIT_DEPTH": f"--depth={git.depth}" if git.depth else "",
        "HUTCH_GIT_USER": git.username or "x-access-token",
        "HUTCH_GIT_PASSWORD": password or "",
    }


class Provision:
    def __init__(self, service: Service) -> None:
        self.svc = service

    @staticmethod
    def needed(spec: SandboxSpec) -> bool:
        return bool(spec.files or spec.setup or spec.git)

    def check(self, spec: SandboxSpec) -> None:
        """What can be refused before anything is made."""
        git = spec.git
        if git is None:
            return
        if git.secret and git.secret not in spec.secrets:
            raise InvalidError(
                f"the clone's secret {git.secret} is not one of the sandbox's secrets",
                hint=f"add --secret {git.secret} (from $ {git.secret}, env:VAR or file:PATH)".replace("$ ", "$"),
            )
        if git.secret and git.secret in spec.secret_hosts:
            self._check_placeholder(git, spec.secret_hosts[git.secret])
        if git.local:
            self.svc.access.host_files("--git-repo with a local repository")
            path = Path(urlsplit(git.url).path)
            if not path.exists():
                raise InvalidError(f"--git-repo {path}: no such file or directory", hint="check the path")
        elif urlsplit(git.url).scheme not in ("http", "https"):
            raise InvalidError(
                f"only http(s) repositories are cloned through the sandbox's proxy, not {git.url}",
                hint="use the repository's https:// URL, or clone it here and give its path",
            )

    @staticmethod
    def _check_placeholder(git: GitSource, hosts: list[str]) -> None:
        """A placeholder token (``--secret-host``) goes to the repository's host only: git in the
        sandbox sends the placeholder in Basic credentials, the proxy puts the value in there."""
        name = git.secret
        if git.local:
            raise InvalidError(
                f"the clone's secret {name} is a placeholder (--secret-host), but {git.url} is cloned on this host, "
                "where no proxy puts a value in",
                hint=f"drop --secret-host {name} (a local repository needs no token), or use the repository's URL",
            )
        host = (urlsplit(git.url).hostname or "").lower()
        if not any(host_matches(host, pattern) for pattern in hosts):
            raise InvalidError(
                f"the clone's secret {name} is a placeholder bound to {', '.join(hosts)}, not to the repository's "
                f"host {host}: the proxy would block the clone's credentials",
                hint=f"bind it to the repository's host: --secret-host {name}={host} (and --allow-host {host})",
            )

    async def run(self, rec: SandboxRecord, spec: SandboxSpec) -> SandboxRecord:
        """Clone, seed, set up; on any failure the sandbox is destroyed and the error raised."""
        try:
            if spec.git is not None:
                await self._clone(rec, spec)
            for f in spec.files:
                await self.svc.files.write(rec.id, f.path, f.data(), f.mode)
            for i, command in enumerate(spec.setup):
                await self._setup(rec, spec, i, command)
        except BaseException as exc:
            why = exc.message if isinstance(exc, HutchError) else f"{type(exc).__name__}: {exc}"
            self.svc.store.events.append("sandbox_setup_failed", rec.id, error=why[:TAIL])
            with contextlib.suppress(HutchError):
                await self.svc.destroy(rec.id, cause="its setup failed", checked=True)
            raise
        return self.svc.get(rec.id)

    async def _exec(
        self, rec: SandboxRecord, argv: list[str], env: dict[str, str], redact: dict[str, str], timeout: float
    ) -> RawOutput:
        spec = ExecSpec(
            run_id=new_id("run"),
            argv=argv,
            cwd=WORKSPACE,
            max_output=1 << 20,
            env=env,
            timeout=timeout,
            redact=redact or None,
        )
        return await self.svc._guarded(rec, self.svc.provider(rec.provider).exec(rec, spec))

    async def _setup(self, rec: SandboxRecord, spec: SandboxSpec, index: int, command: list[str] | str) -> None:
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        t0 = time.monotonic()
        raw = await self._exec(rec, argv, {}, dict(spec.secrets), SETUP_TIMEOUT)
        out, err = _tail(raw.stdout), _tail(raw.stderr)
        self.svc.store.events.append(
            "setup_command", rec.id, index=index, command=command, exit_code=raw.exit_code,
            stdout=out, stderr=err, duration_ms=round((time.monotonic() - t0) * 1000),
        )  # fmt: skip
        if raw.exit_code != 0 or raw.spawn_error:
            said = err or out or raw.spawn_error or raw.reason or "no output"
            raise InvalidError(
                f"setup command {index + 1} ({command if isinstance(command, str) else ' '.join(command)}) "
                f"exited with {raw.exit_code}: {said}",
                hint="fix the command in the manifest's setup; the sandbox was destroyed",
            )

    # -- the clone ------------------------------------------------------------------------

    async def _clone(self, rec: SandboxRecord, spec: SandboxSpec) -> None:
        git = spec.git
        assert git is not None
        password = self._token(rec, spec)
        redact = {git.secret: password} if git.secret and password else {}
        env = _clone_env(git, password)
        cap_kib = str(max(1, git.cap >> 10))
        events = self.svc.store.events
        started: dict[str, Any] = {"url": git.url, "ref": git.ref, "depth": git.depth}
        if git.local:
            events.append("git_clone_started", rec.id, **started, where="host")
            out, err, code = await self._clone_here(rec, env, cap_kib)
        else:
            parts = urlsplit(git.url)
            host = (parts.hostname or "").lower()
            port = parts.port or (443 if parts.scheme == "https" else 80)
            opened = self._opening(rec.spec.network, host, port)
            events.append(
                "git_clone_started", rec.id, **started, where="sandbox", host=host, port=port,
                network=f"{host}:{port} allowed for the clone only" if opened else "already allowed",
            )  # fmt: skip
            out, err, code = await self._clone_inside(rec, env, redact, cap_kib, opened)
        said = _tail(err)
        if code == NO_GIT:
            image = rec.spec.image or "the host's /usr"
            raise UnavailableError(
                f"git is not installed in the sandbox ({image}): the clone of {git.url} needs it",
                hint="use an image with git (hutch image build --from IMAGE --run 'apt-get install -y git'), "
                "or clone it here and give --git-repo a local path",
            )
        if code == OVER_CAP:
            raise InvalidError(
                f"the clone of {git.url} passed its size cap of {format_size(git.cap)} and was stopped",
                hint="raise it (--git-max-size, git.max_size), or take less history (--git-depth 1)",
            )
        if code != 0:
            ref = f" at {git.ref}" if git.ref else ""
            raise InvalidError(
                f"the clone of {git.url}{ref} failed (exit {code}): {said or 'git said nothing'}",
                hint="check the URL and the ref (git ls-remote URL); a private repository needs --git-secret NAME",
            )
        facts = dict(line.split("=", 1) for line in out.decode(errors="replace").splitlines() if "=" in line)
        events.append("git_cloned", rec.id, url=git.url, ref=git.ref, commit=facts.get("commit"), kib=facts.get("kib"))

    @staticmethod
    def _token(rec: SandboxRecord, spec: SandboxSpec) -> str | None:
        """What git in the sandbox gets: the secret's value, or its placeholder when the secret
        is one (the proxy puts the value into the Basic credentials toward the bound host)."""
        git = spec.git
        if git is None or not git.secret:
            return None
        if git.secret not in spec.secret_hosts:
            return spec.secrets.get(git.secret)
        held = (rec.data.get("placeholders") or {}).get(git.secret)
        if not held:  # never the value instead: the sandbox must not see it
            raise UnavailableError(
                f"the sandbox holds no placeholder for the clone's secret {git.secret}",
                hint=f"drop --secret-host {git.secret}, or create the sandbox on a provider with placeholder secrets",
            )
        return str(held)

    @staticmethod
    def _opening(net: NetworkPolicy, host: str, port: int) -> NetworkPolicy | None:
        """The policy that lets the clone reach ``host:port``, or None when this one does."""
        ports = set(net.ports) or ({80, 443} if net.mode == "allowlist" else set())
        covered = (
            net.mode == "open"
            or host in net.allow_hosts
            or any(h.startswith("*.") and host.endswith(h[1:]) for h in net.allow_hosts)
        )
        if net.mode != "none" and covered and (not ports or port in ports):
            return None
        if net.mode == "open":
            return net.model_copy(update={"ports": sorted(ports | {port})})
        hosts = [*net.allow_hosts, host] if host not in net.allow_hosts else list(net.allow_hosts)
        return net.model_copy(update={"mode": "allowlist", "allow_hosts": hosts, "ports": sorted(ports | {port})})

    async def _clone_inside(
        self, rec: SandboxRecord, env: dict[str, str], redact: dict[str, str], cap_kib: str, opened: NetworkPolicy | None
    ) -> tuple[bytes, bytes, int]:
        provider = self.svc.provider(rec.provider)
        during = rec
        if opened is not None:
            opened = opened.check()
            self.svc.access.ceiling(opened)
            during = rec.model_copy(update={"spec": rec.spec.model_copy(update={"network": opened})})
            await self.svc._guarded(rec, network_provider(provider).set_network(during))
        try:
            raw = await self._exec(during, ["/bin/sh", "-c", CLONE, "sh", cap_kib], env, redact, CLONE_TIMEOUT)
        finally:
            if opened is not None:
                await self.svc._guarded(rec, network_provider(provider).set_network(rec))
        return raw.stdout, raw.stderr, raw.exit_code

    async def _clone_here(self, rec: SandboxRecord, env: dict[str, str], cap_kib: str) -> tuple[bytes, bytes, int]:
        """Clone on this host into a directory of the daemon's, then push it into /workspace."""
        tmp = self.svc.workspaces.tmp_path("-clone")
        tree = tmp / "tree"
        tree.mkdir(parents=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", CLONE, "sh", cap_kib, cwd=tree, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)} | env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(proc.communicate(), CLONE_TIMEOUT)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                raise
            code = proc.returncode or 0
            if code == 0:
                archive = tmp / "tree.tar"
                await asyncio.to_thread(_pack, tree, archive)
                provider = transfer_provider(self.svc.provider(rec.provider))
                await self.svc._guarded(rec, provider.import_workspace(rec, archive, []))
            return out, err, code
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)


def _pack(tree: Path, archive: Path) -> None:
    def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(tree, arcname=".", filter=anonymous)
