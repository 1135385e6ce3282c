"""The spec of a new sandbox from the command line's create options, without click (the
plain ``hutch run -- CMD`` path builds one with every option at its default)."""

from __future__ import annotations

from hutch.cli.base import Ctx, parse_pairs
from hutch.wire.build import git_source, sandbox_spec

TYPE_CHECKING = False  # (typing stays out of hutch run's start)
if TYPE_CHECKING:
    from hutch import wire


def build_spec(
    obj: Ctx,
    name: str | None,
    memory: int | None,
    pids: int | None,
    cpus: float | None,
    env: tuple[str, ...],
    mounts: tuple[str, ...],
    labels: tuple[str, ...],
    workdir: str | None,
    provider: str | None,
    network: str | None = None,
    allow_hosts: tuple[str, ...] = (),
    allow_ports: tuple[int, ...] = (),
    allow_cidrs: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
    tenant: str | None = None,
    image: str | None = None,
    user: str | None = None,
    host_ca: bool = False,
    runtime: str | None = None,
    metro: str | None = None,
    *,
    ttl: float | None = None,
    idle: float | None = None,
    on_expire: str | None = None,
    require_approval: tuple[str, ...] = (),
    ssh: bool = False,
    disk: int | None = None,
    secret_hosts: tuple[str, ...] = (),
    secret_body: tuple[str, ...] = (),
    no_intercept: tuple[str, ...] = (),
    manifest: str | None = None,
    git_repo: str | None = None,
    git_depth: str | None = None,
    git_secret: str | None = None,
    git_max_size: int | None = None,
    placement: str | None = None,
    node: str | None = None,
) -> wire.SandboxSpec:
    """The spec of the command line's options (``K=V`` pairs, secrets read here) over the
    manifest's, built as every edge builds one: :func:`hutch.wire.build.sandbox_spec`."""
    from hutch.manifest import refs

    sources = refs.parse(secrets)
    flags = dict(
        name=name,
        provider=provider,
        memory=memory,
        pids=pids,
        cpus=cpus,
        disk=disk,
        env=parse_pairs(env, "env", from_env=True),
        labels=parse_pairs(labels, "label"),
        mounts=mounts,
        mount_flag="--mount",
        workdir=workdir,
        network=network,
        allow_hosts=allow_hosts,
        allow_ports=allow_ports,
        allow_cidrs=allow_cidrs,
        secrets=refs.resolve(sources),
        secret_sources=sources,
        tenant=tenant,
        image=image,
        user=user,
        host_ca=host_ca,
        runtime=runtime,
        metro=metro,
        ssh=ssh,
        placement=placement,
        node=node,
        ttl=ttl,
        idle_timeout=idle,
        on_expire=on_expire,
        require_approval=[a.strip() for item in require_approval for a in item.split(",") if a.strip()],
        secret_hosts=secret_hosts,
        secret_body=secret_body,
        no_intercept=no_intercept,
        git=git_source(git_repo, depth=git_depth or 1, secret=git_secret, max_size=git_max_size) if git_repo else None,
        git_depth=git_depth,
        git_secret=git_secret,
        git_max_size=git_max_size,
    )
    from hutch.manifest.load import spec_args

    return sandbox_spec(obj.settings, **spec_args(manifest, flags, obj.settings.manifest))
