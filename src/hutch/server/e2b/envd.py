"""The sandbox side (``/e2b/envd``): Connect calls of ``process.Process`` and
``filesystem.Filesystem``, ``GET/POST /files`` (also at the root, where ``download_url()``
and ``upload_url()`` point) and ``/health``.

Every request has been authenticated by :mod:`hutch.server.e2b.auth` (the middleware put the
sandbox's owner in the actor and the sandbox id in ``scope["e2b.sandbox"]``)."""

from __future__ import annotations

import gzip
import zlib

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from hutch.actors import set_current
from hutch.errors import HutchError
from hutch.server.e2b import connect
from hutch.server.e2b.auth import Tokens, hutch_id, signed_sandbox
from hutch.server.e2b.connect import ConnectError
from hutch.server.e2b.filesystem import Files
from hutch.server.e2b.process import Processes
from hutch.server.e2b.users import from_basic
from hutch.server.e2b.watch import Watches
from hutch.service import Service
from hutch.service.files import MAX_FILE

STREAMS = {"process.Process/Start", "process.Process/Connect", "filesystem.Filesystem/WatchDir"}
UNARY = {
    "process.Process/List",
    "process.Process/SendInput",
    "process.Process/SendSignal",
    "process.Process/CloseStdin",
    "process.Process/Update",
    *(
        f"filesystem.Filesystem/{m}"
        for m in ("Stat", "ListDir", "MakeDir", "Move", "Remove", "CreateWatcher", "GetWatcherEvents", "RemoveWatcher")
    ),
}


def connect_error(exc: ConnectError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=connect.HTTP_STATUS.get(exc.code, 400))


def file_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it passes ``limit`` (never read whole first)."""
    size = int(request.headers.get("content-length") or 0)
    if size > limit:
        raise ConnectError("resource_exhausted", f"message of {size} bytes is larger than the limit of {limit}")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise ConnectError("resource_exhausted", f"message larger than the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def router(service: Service, tokens: Tokens, procs: Processes) -> APIRouter:
    r = APIRouter()
    files = Files(service)
    watches = Watches(service, files)

    @r.get("/e2b/envd/health", include_in_schema=False)
    async def health(request: Request) -> Response:
        """204 while the sandbox named runs; 502 otherwise, which is how the SDKs'
        ``is_running()`` learn it is not (E2B's proxy answers so for a sandbox gone)."""
        named = request.headers.get("e2b-sandbox-id")
        if named:
            try:
                service.live(hutch_id(named), touch=False)
            except HutchError:
                return file_error(502, f"sandbox {named} is not running")
        return Response(status_code=204)

    @r.post("/e2b/envd/{service_name}/{method}", include_in_schema=False)
    async def rpc(service_name: str, method: str, request: Request) -> Response:
        name = f"{service_name}/{method}"
        sandbox_id: str = request.scope.get("e2b.sandbox", "")
        streaming = name in STREAMS
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            if name not in STREAMS and name not in UNARY:
                raise ConnectError("unimplemented", f"{name} is not implemented by hutch's envd (see docs/e2b.md)")
            if ctype != (connect.STREAM if streaming else connect.UNARY):
                want = connect.STREAM if streaming else connect.UNARY
                raise connect.invalid(f"{name} takes Content-Type {want}, got {ctype!r}")
            deadline = connect.timeout_of(request.headers)
            body = await read_body(request, connect.MAX_MESSAGE + 5)
            msg = connect.unenvelope(body) if streaming else connect.decode(body)
            service.live(sandbox_id)  # a paused or gone sandbox answers before anything runs
            user = from_basic(request.headers.get("authorization"))
            if streaming:
                if method == "WatchDir":
                    await procs.users.check_files(sandbox_id, user)
                    messages = await watches.start(sandbox_id, msg, deadline)
                elif method == "Start":
                    messages = await procs.start(sandbox_id, msg, deadline, user)
                else:
                    messages = procs.connect(sandbox_id, msg)
                return StreamingResponse(connect.streamed(messages), media_type=connect.STREAM)
            if service_name == "filesystem.Filesystem":
                await procs.users.check_files(sandbox_id, user)
                answer = await files.call(method, sandbox_id, msg)
            elif method == "List":
                answer = procs.list(sandbox_id)
            elif method == "SendInput":
                answer = await procs.send_input(sandbox_id, msg)
            elif method == "CloseStdin":
                answer = await procs.close_stdin(sandbox_id, msg)
            elif method == "SendSignal":
                answer = await procs.send_signal(sandbox_id, msg)
            else:
                answer = await procs.update(sandbox_id, msg)
            return JSONResponse(answer)
        except ConnectError as exc:
            error = exc
        except HutchError as exc:
            error = ConnectError.of(exc)
        if streaming and ctype == connect.STREAM:  # a stream's error is its end-of-stream frame
            return Response(connect.end_stream(error), media_type=connect.STREAM)
        return connect_error(error)

    async def get_file(request: Request) -> Response:
        try:
            sandbox_id, path = authorize(request, "read")
            assert path is not None  # authorize refuses a read without one
            await procs.users.check_files(sandbox_id, request.query_params.get("username") or None)
            data, truncated = await service.read_file(sandbox_id, path, MAX_FILE)
        except ConnectError as exc:
            return file_error(connect.HTTP_STATUS.get(exc.code, 400), exc.message)
        except HutchError as exc:
            return file_error(exc.status if exc.status < 500 else 502, exc.message)
        if truncated:
            return file_error(400, f"{path} is larger than {MAX_FILE} bytes, the most hutch's E2B API reads at once")
        return Response(data, media_type="application/octet-stream")

    async def post_file(request: Request) -> Response:
        try:
            sandbox_id, path = authorize(request, "write")
            user = request.query_params.get("username") or None
            written = []
            ctype = request.headers.get("content-type", "")
            if ctype.startswith("multipart/form-data"):
                form = await request.form(max_files=100, max_fields=100, max_part_size=MAX_FILE)
                await procs.users.check_files(sandbox_id, user)  # once the body is read: the client hears the answer
                for _field, item in form.multi_items():
                    if isinstance(item, str):
                        continue
                    target = files.full(sandbox_id, item.filename if (path is None or len(form) > 1) else path)
                    await service.write_file(sandbox_id, target, await item.read())
                    written.append(target)
            else:
                if path is None:
                    raise connect.invalid("an octet-stream upload names its file in ?path=")
                data = await read_body(request, MAX_FILE)
                await procs.users.check_files(sandbox_id, user)
                if request.headers.get("content-encoding", "").lower() == "gzip":
                    data = inflate(data)
                target = files.full(sandbox_id, path)
                await service.write_file(sandbox_id, target, data)
                written.append(target)
        except ConnectError as exc:
            return file_error(connect.HTTP_STATUS.get(exc.code, 400), exc.message)
        except HutchError as exc:
            return file_error(exc.status if exc.status < 500 else 502, exc.message)
        return JSONResponse([{"name": p.rsplit("/", 1)[-1], "type": "file", "path": p} for p in written])

    def authorize(request: Request, operation: str) -> tuple[str, str | None]:
        q = request.query_params
        path = q.get("path")
        sandbox_id: str | None = request.scope.get("e2b.sandbox") or None
        given = q.get("signature")
        if given is not None:
            raw_exp = q.get("signature_expiration")
            if raw_exp is not None and not raw_exp.isdigit():
                raise connect.invalid("signature_expiration must be a Unix time")
            exp = int(raw_exp) if raw_exp else None
            user = q.get("username", "")
            actor, sandbox_id = signed_sandbox(service, tokens, sandbox_id, path or "", operation, user, given, exp)
            set_current(actor)  # this request's task only
        if sandbox_id is None:
            raise ConnectError("unauthenticated", "a file request names its sandbox")
        if operation == "read" and path is None:
            raise connect.invalid("give the file in ?path=")
        return sandbox_id, (files.full(sandbox_id, path) if path is not None else None)

    for prefix in ("/e2b/envd", ""):
        r.add_api_route(prefix + "/files", get_file, methods=["GET"], include_in_schema=False)
        r.add_api_route(prefix + "/files", post_file, methods=["POST"], include_in_schema=False)
    return r


def inflate(data: bytes) -> bytes:
    """A gzip body, bounded: past MAX_FILE it is refused (a small bomb stays small)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, MAX_FILE + 1)
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise connect.invalid(f"the body is not gzip: {exc}") from None
    if len(out) > MAX_FILE or d.unconsumed_tail:
        raise ConnectError("resource_exhausted", f"the file is larger than {MAX_FILE} bytes once decompressed")
    return out
