"""The warm pool's shapes and sizes: what each shape should hold (its size, capped by the
memory the machine has), what it holds now, and how that reads in ``hutch pool status``
and ``hutch doctor``. The workflow (members, hand-out, refill) is in service/pool.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hutch.errors import InvalidError
from hutch.models import SandboxRecord, SandboxSpec, SandboxState
from hutch.provider import CheckResult, pool_provider
from hutch.store.pool import MemberRow

if TYPE_CHECKING:
    from hutch.service import Service

MAX_SIZE = 1000  # members per shape
MEMORY_SHARE = 0.25  # of the memory the machine has available, at most, for idle members
MEMBER_ESTIMATE = 16 << 20  # bytes per member until one is measured


@dataclass(frozen=True, order=True)
class Shape:
    provider: str
    image: str = ""  # "": the host's /usr

    @property
    def label(self) -> str:
        return self.image or "host"

    def spec(self) -> SandboxSpec:
        return SandboxSpec(provider=self.provider, image=self.image or None)

    @classmethod
    def of(cls, spec: SandboxSpec) -> Shape:
        return cls(spec.provider, spec.image or "")


def member_record(member: MemberRow) -> SandboxRecord:
    return SandboxRecord(
        id=member.id,
        provider=member.provider,
        state=SandboxState.running,
        spec=member.spec,
        data=member.data,
        enforcement=member.enforcement,
        created_at=member.created_at,
        updated_at=member.created_at,
    )


class PoolSizes:
    """What the pool holds and should hold (the base of :class:`hutch.service.pool.Pool`)."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.store = svc.store
        self.idle: dict[Shape, list[MemberRow]] = {}  # ready members, oldest first
        self.starting: dict[Shape, int] = {}
        self._running = False  # the daemon's pool refills; an in-process service's is left as it is
        self._per_member = MEMBER_ESTIMATE

    def default_shape(self) -> Shape | None:
        """The shape of a create that names no image (the host's /usr, or the default image
        the caller fills in, such as the local_image setting)."""
        provider = self.svc.provider(self.svc.settings.provider)
        image = self.svc.settings.default_image(provider.name) or ""
        return Shape(provider.name, image) if provider.capabilities.pool else None

    def sizes(self) -> dict[Shape, tuple[int, str]]:
        """Each shape's size and where it comes from."""
        out: dict[Shape, tuple[int, str]] = {}
        default = self.default_shape()
        if default is not None:
            out[default] = (max(0, self.svc.settings.pool_size), "the pool_size setting")
        for (provider, image), size in self.store.pool.sizes().items():
            out[Shape(provider, image)] = (size, "hutch pool set")
        return out

    def plan(self) -> dict[Shape, tuple[int, str | None]]:
        """Each shape's target (its size, capped by memory) and why it is capped (None: not)."""
        out: dict[Shape, tuple[int, str | None]] = {}
        budget: dict[str, int | None] = {}
        for shape, (size, _) in sorted(self.sizes().items(), key=lambda item: (item[0].provider, item[0].image != "", item[0])):
            if shape.provider not in budget:
                budget[shape.provider] = self._allowed(shape.provider)
            allowed = budget[shape.provider]
            if allowed is None or size <= allowed:
                out[shape] = (size, None)
                budget[shape.provider] = None if allowed is None else allowed - size
                continue
            why = (
                f"capped at {allowed} of {size} by memory: members may take {MEMORY_SHARE:.0%} of the memory "
                f"available, about {self._per_member >> 20} MiB each"
            )
            out[shape] = (allowed, why)
            budget[shape.provider] = 0
        return out

    def _allowed(self, provider_name: str) -> int | None:
        provider = self.svc.provider(provider_name)
        if not provider.capabilities.pool:
            return 0
        available = pool_provider(provider).memory_available()
        if available is None:
            return None
        held = sum(len(m) + self.starting.get(s, 0) for s, m in self.idle.items() if s.provider == provider_name)
        return int((available + held * self._per_member) * MEMORY_SHARE) // self._per_member

    def target(self, shape: Shape) -> int:
        return self.plan().get(shape, (0, None))[0]

    def count(self, shape: Shape) -> int:
        return len(self.idle.get(shape, [])) + self.starting.get(shape, 0)

    def _shape_for(self, image: str | None) -> Shape:
        provider = self.svc.provider(self.svc.settings.provider)
        if not provider.capabilities.pool:
            raise InvalidError(f"the {provider.name} provider keeps no warm pool", hint="use the local provider")
        if image and not provider.capabilities.images:
            raise InvalidError(f"the {provider.name} provider does not boot images", hint="pool the host shape: drop IMAGE")
        default = self.default_shape()
        return Shape(provider.name, image or "") if image or default is None else default

    async def status(self) -> dict[str, Any]:
        pools: list[dict[str, Any]] = []
        sizes = self.sizes()
        for shape, (target, capped) in self.plan().items():
            memory = 0
            provider = pool_provider(self.svc.provider(shape.provider))
            for member in self.idle.get(shape, []):
                memory += await provider.member_memory(member_record(member)) or 0
            size, source = sizes[shape]
            pools.append(
                {
                    "provider": shape.provider,
                    "image": shape.image or None,
                    "shape": shape.label,
                    "size": size,
                    "source": source,
                    "target": target,
                    "capped": capped,
                    "ready": len(self.idle.get(shape, [])),
                    "starting": self.starting.get(shape, 0),
                    "memory": memory,
                }
            )
        return {
            "refilling": self._running,
            "members": sum(p["ready"] + p["starting"] for p in pools),
            "memory": sum(p["memory"] for p in pools),
            "pools": pools,
        }


def pool_check(status: dict[str, Any]) -> CheckResult | None:
    """The ``pool`` line of ``hutch doctor`` for a pool status: its members and their
    memory; a pool capped by memory fails it (None: no pool at all)."""
    if not status["pools"]:
        return None
    parts = []
    for p in status["pools"]:
        part = f"{p['shape']} {p['ready']}/{p['target']} ready ({p['memory'] >> 20} MiB)"
        parts.append(part + (f", {p['capped']}" if p["capped"] else ""))
    capped = [p for p in status["pools"] if p["capped"]]
    fix = None
    if capped:
        words = ["hutch pool set", *([capped[0]["image"]] if capped[0]["image"] else []), f"--size {capped[0]['target']}"]
        fix = "lower the pool's size: " + " ".join(words)
    return CheckResult("pool", not capped, f"{status['members']} members: " + "; ".join(parts), fix)
