"""HTTP routes for pause/resume, keepalive, sub-agents, labels and approvals."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field, StrictFloat

from hutch.models import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalRequest,
    Limits,
    NetworkPolicy,
    SandboxRecord,
    SandboxSpec,
)
from hutch.server.edge import unless_gone
from hutch.service import Service


class KeepaliveRequest(BaseModel):
    ttl: StrictFloat | str | None = None  # strict: true is not a number of seconds


class SubagentRequest(BaseModel):
    name: str | None = None
    workspace: Literal["rw", "ro"] | None = None
    limits: Limits = Field(default_factory=Limits)
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    ttl: StrictFloat | str | None = None
    idle_timeout: StrictFloat | str | None = None
    on_expire: Literal["destroy", "pause"] = "destroy"
    require_approval: list[str] = Field(default_factory=list)
    network: NetworkPolicy | None = None  # default: the parent's; never wider than it


class LabelRequest(BaseModel):
    set: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)


def router(service: Service) -> APIRouter:
    r = APIRouter()
    life = service.lifecycle
    approvals = service.approvals

    @r.post("/v1/sandboxes/{ref}/pause")
    async def pause(ref: str) -> dict[str, Any]:
        return await life.pause(ref)

    @r.post("/v1/sandboxes/{ref}/resume")
    async def resume(ref: str) -> dict[str, Any]:
        return await life.resume(ref)

    @r.post("/v1/sandboxes/{ref}/keepalive")
    async def keepalive(ref: str, req: KeepaliveRequest) -> dict[str, Any]:
        ttl = SandboxSpec.model_validate({"ttl": req.ttl}).ttl  # parsed and bounded as on create
        return life.keepalive(ref, ttl)

    @r.post("/v1/sandboxes/{ref}/subagents", status_code=201)
    async def subagent(ref: str, req: SubagentRequest) -> SandboxRecord:
        parent = service.get(ref)
        spec = SandboxSpec(provider=parent.provider, workdir=parent.spec.workdir, **req.model_dump(exclude_none=True))
        return await life.subagent(ref, spec)

    @r.post("/v1/sandboxes/{ref}/labels")
    async def label(ref: str, req: LabelRequest) -> SandboxRecord:
        return life.label(ref, req.set, req.remove)

    @r.post("/v1/approvals", status_code=201)
    async def request(req: ApprovalRequest) -> ApprovalRecord:
        return approvals.request(req.action, req.sandbox, req.reason, req.timeout)

    @r.get("/v1/approvals")
    async def list_(pending: bool = False, sandbox: str | None = None) -> list[ApprovalRecord]:
        return approvals.list(pending, sandbox)

    @r.get("/v1/approvals/{approval_id}")
    async def get(approval_id: str) -> ApprovalRecord:
        return approvals.get(approval_id)

    @r.post("/v1/approvals/{approval_id}/wait")
    async def wait(approval_id: str, request: Request, timeout: float | None = Query(None, gt=0, le=7 * 86400)) -> ApprovalRecord:
        return await unless_gone(request, approvals.wait(approval_id, timeout))  # ends when its client hangs up

    @r.post("/v1/approvals/{approval_id}/decision")
    async def decide(approval_id: str, req: ApprovalDecision) -> ApprovalRecord:
        return approvals.decide(approval_id, req.approve, req.reason, req.by)

    return r
