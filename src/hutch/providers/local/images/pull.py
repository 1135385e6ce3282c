"""Pulling an image from a registry into the store.

The manifest (an index resolved to the host's platform), then the config, then the layers the
store does not have, at most ``parallel`` at a time, each verified as it streams and resumed
with ``Range`` when its connection is cut, and unpacked while it downloads (a worker thread
follows the partial blob, ``BlobWriter.follow``: the layer is kept only once the blob is
verified and its tar hashes to the config's diff_id; when that unpack fails, for a transfer
that started over or on bytes a retry replaced, the layer is unpacked again from the stored,
verified blob, whose outcome is the pull's: a followed unpack's error is never the answer);
then :func:`~hutch.providers.local.images.build.build`
(in a worker thread). Progress goes to ``emit`` as events (``wire.ImagePullFrame``).
A second pull of an image whose blobs are stored transfers no blob (only its manifest is asked
for again: a tag may have moved).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from hutch.credentials import RegistryLogin
from hutch.errors import HutchError, InvalidError
from hutch.imageref import RegistryRef
from hutch.providers.local.images import manifests as m
from hutch.providers.local.images.blobs import AbandonedError, BlobStore, BlobWriter, BusyError
from hutch.providers.local.images.build import Emit, Parts, build, ensure_layer
from hutch.providers.local.images.registry import Registry
from hutch.providers.local.images.store import ImageStore

PROGRESS_EVERY = 0.2  # seconds between progress events of one layer
BUSY_POLL = 0.2


@dataclass(frozen=True)
class PullOptions:
    platform: str
    insecure: bool = False
    parallel: int = 4
    keep_owners: bool = False


async def _writer(blobs: BlobStore, digest: str, size: int | None) -> BlobWriter | None:
    """A writer for a blob, waiting while another pull writes it; None once it is stored."""
    while True:
        if blobs.has(digest):
            return None
        try:
            return blobs.writer(digest, size)
        except BusyError:
            await asyncio.sleep(BUSY_POLL)


async def _fetch(reg: Registry, blobs: BlobStore, digest: str, size: int | None, on_bytes: Callable[[int], None]) -> bool:
    """Download one blob unless the store has it; whether it was downloaded."""
    writer = await _writer(blobs, digest, size)
    if writer is None:
        return False
    try:
        await reg.blob(writer, on_bytes)
    finally:
        writer.close()
    return True


async def _manifest(reg: Registry, ref: RegistryRef, want: str) -> tuple[dict[str, Any], str, list[str]]:
    """The image manifest for ``want``: its document, its digest, and the digests it is known by."""
    data, ctype, digest = await reg.manifest(ref.reference)
    doc = m.load(data, f"manifest of {ref}")
    digests = [digest]
    mt = m.media_type(doc, ctype)
    if mt in m.INDEXES:
        chosen, _ = m.choose(doc, want, str(ref))
        data, ctype, digest = await reg.manifest(chosen)
        doc = m.load(data, f"manifest of {ref} for {want}")
        mt = m.media_type(doc, ctype)
        digests.append(digest)
    if mt not in m.MANIFESTS:
        raise InvalidError(f"{ref} is not an image (its manifest is {mt[:100]!r})", hint="only OCI and Docker images are pulled")
    return doc, digest, digests


async def pull(
    store: ImageStore, ref: RegistryRef, auth: RegistryLogin | None, opts: PullOptions, emit: Emit
) -> tuple[dict[str, Any], int]:
    """Pull ``ref`` into ``store``; the image's row and the blob bytes transferred."""
    async with Registry(ref, auth, insecure=opts.insecure) as reg:
        doc, digest, digests = await _manifest(reg, ref, opts.platform)
        man = m.parse_manifest(doc, f"manifest of {ref}")
        await _fetch(reg, store.blobs, man.config_digest, man.config_size, lambda n: None)
        config_bytes = await asyncio.to_thread(store.blobs.read, man.config_digest, m.MAX_CONFIG)
        config, _cfg, diff_ids, platform = m.parse_config(config_bytes, opts.platform, str(ref))
        missing = [layer for layer in man.layers if not store.blobs.has(layer.digest)]
        total = sum(layer.size for layer in man.layers)
        emit({"type": "resolved", "ref": str(ref), "digest": digest, "platform": platform,
              "layers": len(man.layers), "size": total, "missing": sum(layer.size for layer in missing)})  # fmt: skip
        for layer in man.layers:
            if layer not in missing:
                emit({"type": "layer", "digest": layer.digest, "size": layer.size, "status": "exists"})
        gate = asyncio.Semaphore(max(1, opts.parallel))
        diff_of = dict(zip((layer.digest for layer in man.layers), diff_ids, strict=False))
        # the unpacks that follow downloads wait on them: their own threads, not the loop's shared pool
        unpackers = ThreadPoolExecutor(max(1, opts.parallel), thread_name_prefix="hutch-unpack")
        loop = asyncio.get_running_loop()

        def unpack(layer: m.Layer, diff_id: str, follow: Any = None) -> asyncio.Future[tuple[str, bool]]:
            return loop.run_in_executor(unpackers, _unpack, store, layer, diff_id, opts.keep_owners, follow)

        async def one(layer: m.Layer) -> None:
            diff_id = diff_of.get(layer.digest)
            unpacking: asyncio.Future[tuple[str, bool]] | None = None
            async with gate:
                done, last = 0, 0.0

                def on_bytes(n: int) -> None:
                    nonlocal done, last
                    done += n
                    now = time.monotonic()
                    if now - last >= PROGRESS_EVERY:
                        last = now
                        emit({"type": "progress", "digest": layer.digest, "bytes": done, "size": layer.size})

                emit({"type": "layer", "digest": layer.digest, "size": layer.size, "status": "downloading"})
                writer = await _writer(store.blobs, layer.digest, layer.size)
                stored = writer is None
                try:
                    if writer is not None:
                        if diff_id is not None and writer.offset == 0:  # unpacked as it arrives
                            unpacking = unpack(layer, diff_id, writer.follow())
                        await reg.blob(writer, on_bytes)
                        stored = True
                finally:
                    if writer is not None:
                        writer.close()  # a follower still waiting gives up (AbandonedError)
                    if unpacking is not None and not stored:  # no unpack outlives a failed download
                        await asyncio.wait([unpacking])
                        if not unpacking.cancelled():
                            unpacking.exception()  # AbandonedError, or what it met first: the download's error wins
                emit({"type": "layer", "digest": layer.digest, "size": layer.size,
                      "status": "downloaded" if writer is not None else "exists"})  # fmt: skip
            if diff_id is None:
                return
            if unpacking is not None:
                try:
                    await unpacking
                except (AbandonedError, HutchError, OSError):  # it read bytes that were not yet verified
                    unpacking = None  # (a restart, garbage a retry replaced): the stored, verified blob decides
            if unpacking is None:
                await unpack(layer, diff_id)
            emit({"type": "layer", "digest": layer.digest, "size": layer.size, "status": "unpacked"})

        tasks = [asyncio.create_task(one(layer)) for layer in missing]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            unpackers.shutdown(wait=False, cancel_futures=True)  # each task awaited its unpack
        transferred = reg.transferred
    parts = Parts(doc, digest, config, man.config_digest, man.layers, diff_ids, platform, f"pull {ref}")
    names = [ref.name] if not ref.digest else []
    names += [f"{ref.repository}@{d}" for d in digests]
    row = await asyncio.to_thread(build, store, parts, names, emit, keep_owners=opts.keep_owners)
    return row, transferred


def _unpack(store: ImageStore, layer: m.Layer, diff_id: str, keep: bool, follow: Any) -> tuple[str, bool]:
    with contextlib.closing(follow) if follow is not None else contextlib.nullcontext():
        return ensure_layer(store, layer, diff_id, keep, follow)


def keep_owners() -> bool:
    """As root the layers keep the owners their tars say; as a user, files belong to the user."""
    return os.geteuid() == 0
