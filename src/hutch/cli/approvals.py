"""confirm, approve, approvals: asking a human, and answering."""

from __future__ import annotations

import getpass
import os
import socket
import time
from typing import TYPE_CHECKING

import click

from hutch.cli.common import DURATION, EXIT_FAILED, Ctx, SandboxCommand, emit, json_option, old_spelling, table
from hutch.wire.build import approval_request

if TYPE_CHECKING:
    from hutch import wire


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _show(obj: Ctx, apr: wire.ApprovalRecord) -> None:
    if obj.json:
        emit(apr)
        return
    line = f"{apr['id']}: {apr['status']}"
    if apr.get("decided_by"):
        line += f" by {apr['decided_by']}"
    if apr.get("decision_reason"):
        line += f": {apr['decision_reason']}"
    click.echo(line)


@click.command(cls=SandboxCommand)
@click.argument("sandbox")
@click.argument("action")
@click.option("--reason", help="Why: shown to the human who decides.")
@click.option(
    "--timeout", type=DURATION, default="10m", show_default=True, help="Give up after this long (exit 1, status expired)."
)
@click.option("--no-wait", is_flag=True, help="Print the request id at once (decide later; follow with hutch approvals).")
@json_option
@click.pass_obj
def confirm(obj: Ctx, sandbox: str, action: str, reason: str | None, timeout: float, no_wait: bool) -> None:
    """Ask a human to approve ACTION on SANDBOX, and wait for the answer.

    Exit 0 when approved; 1 when rejected or expired. The request is durable: it
    survives a daemon restart, and hutch approve ID decides it from any terminal.
    """
    seconds = timeout
    apr = obj.client.request_approval(approval_request(action, sandbox, reason, seconds))
    if no_wait:
        emit(apr) if obj.json else click.echo(apr["id"])
        return
    if not obj.json:
        click.echo(f"waiting for a human: hutch approve {apr['id']}   (or --reject --reason ...)", err=True)
    deadline = time.monotonic() + seconds + 5
    while apr["status"] == "pending" and time.monotonic() < deadline:
        apr = obj.client.wait_approval(apr["id"], min(60.0, max(1.0, deadline - time.monotonic())))
    _show(obj, apr)
    if apr["status"] != "approved":
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.argument("approval_id", metavar="ID")
@click.option("--reject", is_flag=True, help="Reject instead of approving.")
@click.option("--reason", help="Why (recorded with the decision).")
@json_option
@click.pass_obj
def approve(obj: Ctx, approval_id: str, reject: bool, reason: str | None) -> None:
    """Approve (or --reject) a pending request. Who decided, and when, is an event."""
    _show(obj, obj.client.decide(approval_id, not reject, reason, _who()))


@click.command(cls=SandboxCommand)
@click.argument("sandbox", required=False)
@click.option("--pending", is_flag=True, help="Only requests still waiting for a decision.")
@json_option
@old_spelling("--sandbox", "SANDBOX", "sandbox")
@click.pass_obj
def approvals(obj: Ctx, sandbox: str | None, pending: bool) -> None:
    """List approval requests (newest last); with SANDBOX, only those about it."""
    items = obj.client.approvals(pending, sandbox)
    if obj.json:
        emit(items)
        return
    rows = [
        [
            a["id"],
            a.get("sandbox_id") or "-",
            (a["action"] + (f" {a['detail']}" if a.get("detail") else ""))[:60],
            a["status"],
            a.get("decided_by") or "-",
            (a.get("reason") or "")[:40],
        ]
        for a in items
    ]
    table(rows, ["id", "sandbox", "action", "status", "by", "reason"])
