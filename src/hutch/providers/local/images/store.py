"""The content-addressed image store under the state directory, and the :class:`ImageSource` sandboxes use.

On disk (``<home>/images``)::

    blobs/sha256/<hex>    every blob (layers as they came, configs, manifests), verified (blobs.py)
    layers/<hex>/         each layer unpacked once, by its diff_id, shared by every image that has it
    rootfs/<hex>/         each image's flattened root filesystem, by its id (hardlinks into layers/)
    tmp/                  partial blobs, blobs an import is writing, layers and root filesystems being built
    locks/                one lock file per layer and root filesystem being built, and ``store.lock``

The rows (which images exist, their manifest, config and layers, and the names pointing at them)
are in SQLite (``hutch.store.images``), handed in as :class:`ImageRows`. An image's id is the
digest of its config. Pulls and imports hold ``store.lock`` shared; removing files (``collect``)
holds it exclusively, so nothing a pull is about to record is ever removed under it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from hutch import imageref as refs
from hutch.errors import InvalidError, NotFoundError
from hutch.providers.local.images.blobs import BlobStore
from hutch.providers.local.images.manifests import image_config
from hutch.providers.local.images.types import ResolvedImage


class ImageRows(Protocol):
    """What the store needs of its table (``hutch.store.images.ImageTable``). ``owner``: whose images
    (the local user, a key) a call is about; None is every owner's (an admin's view)."""

    def put(self, image: dict[str, Any], names: list[str], owner: str | None = None) -> None: ...
    def get(self, image_id: str) -> dict[str, Any] | None: ...
    def held(self, image_id: str, owner: str | None) -> bool: ...
    def by_name(self, name: str, owner: str | None = None, prefer: str | None = None) -> str | None: ...
    def named(self, name: str, owner: str | None = None, prefer: str | None = None) -> tuple[str, str] | None: ...
    def by_prefix(self, hex_prefix: str, owner: str | None = None) -> str | None: ...
    def by_manifest(self, digest: str, owner: str | None = None) -> str | None: ...
    def names(self, image_id: str, owner: str | None = None) -> list[str]: ...
    def all(self, owner: str | None = None) -> list[dict[str, Any]]: ...
    def untag(self, name: str, owner: str | None = None) -> bool: ...
    def delete(self, image_id: str) -> list[str]: ...
    def disown(self, image_id: str, owner: str) -> tuple[list[str], bool]: ...


@contextlib.contextmanager
def file_lock(path: Path, shared: bool = False) -> Iterator[None]:
    """An flock on ``path`` (blocking: call from a worker thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_tree(path: Path) -> int:
    """Delete a directory tree (also one whose directories are not writable); the bytes freed
    (files other hardlinks still hold are not counted)."""
    freed = 0
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(FileNotFoundError):
            freed = path.lstat().st_size
            path.unlink()
        return freed
    for top, _dirs, _files in os.walk(path):  # make every directory ours to empty
        with contextlib.suppress(OSError):
            mode = os.lstat(top).st_mode
            if mode & 0o700 != 0o700:
                os.chmod(top, stat.S_IMODE(mode) | 0o700)
    for top, dirs, files in os.walk(path, topdown=False):
        for name in files:
            p = os.path.join(top, name)
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                os.unlink(p)
                if st.st_nlink == 1:
                    freed += st.st_blocks * 512
        for name in dirs:
            p = os.path.join(top, name)
            with contextlib.suppress(OSError):
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    os.rmdir(p)
    with contextlib.suppress(OSError):
        os.rmdir(path)
    return freed


def _is_temporary(name: str) -> bool:
    """A directory unpack_layer or flatten builds beside its destination (``.NAME.unpack-XXXX``)."""
    return name.startswith(".") and (".unpack-" in name or ".flatten-" in name)


class ImageStore:
    """Images on disk and their rows; implements ``ImageSource``."""

    def __init__(self, root: Path, rows: ImageRows) -> None:
        self.root = root
        self.rows = rows
        self.blobs = BlobStore(root)
        self.layers = root / "layers"
        self.rootfs_dir = root / "rootfs"
        self.tmp = root / "tmp"
        self.locks = root / "locks"

    # -- paths and locks ---------------------------------------------------------------

    def layer_path(self, diff_id: str) -> Path:
        return self.layers / refs.check_digest(diff_id, "diff_id")[7:]

    def rootfs_path(self, image_id: str) -> Path:
        return self.rootfs_dir / refs.check_digest(image_id, "image id")[7:]

    def lock(self, name: str) -> contextlib.AbstractContextManager[None]:
        return file_lock(self.locks / f"{name}.lock")

    def shared(self) -> contextlib.AbstractContextManager[None]:
        """Held by a pull or an import from its first blob to its row: files are not collected meanwhile."""
        return file_lock(self.locks / "store.lock", shared=True)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        return file_lock(self.locks / "store.lock")

    # -- looking images up -------------------------------------------------------------

    def find(self, text: str, owner: str | None = None, prefer: str | None = None) -> dict[str, Any] | None:
        """The row ``text`` names (a name, ``NAME@DIGEST``, an id or a unique id prefix), or None.
        ``owner``: only that owner's names and images; None: any owner's (``prefer``'s names first)."""
        found = self._find(text, owner, prefer)
        return self.rows.get(found[1]) if found is not None else None

    def _find(self, text: str, owner: str | None, prefer: str | None) -> tuple[str | None, str] | None:
        """Whose name ``text`` is (None: not a name) and the image id, or None."""
        try:
            ref = refs.parse_registry(text)
        except InvalidError:
            ref = None
        if ref is not None:
            if (named := self.rows.named(ref.name, owner, prefer)) is not None:
                return named
            if ref.digest and (image_id := self.rows.by_manifest(ref.digest, owner)) is not None:
                return None, image_id  # pulled by tag, named by its manifest digest
        if (hex_prefix := refs.image_id(text)) is not None and (image_id := self.rows.by_prefix(hex_prefix, owner)) is not None:
            return None, image_id
        return None

    def lookup(self, text: str, owner: str | None = None, prefer: str | None = None) -> dict[str, Any]:
        row = self.find(text, owner, prefer)
        if row is None:
            local = text == "-" or text.partition(":")[0] in refs.LOCAL_TRANSPORTS
            hint = f"hutch image import {text} NAME" if local else f"hutch image pull {text}"
            raise NotFoundError(f"no image {text!r} in the store", hint=f"{hint} (hutch image list shows what is stored)")
        return row

    def resolve(self, ref: str, owner: str | None = None) -> ResolvedImage:
        """``ImageSource.resolve``: a stored image, ready to start sandboxes from. ``owner`` (the
        sandbox's): its own names and images first, then any owner's (the Service has already
        refused an image the request's actor may not use)."""
        row = self.find(ref, owner) or self.lookup(ref, None, owner)
        rootfs = self.rootfs_path(row["id"])
        if not rootfs.is_dir():
            raise NotFoundError(
                f"image {ref!r} has no root filesystem on disk (it was removed or never finished)",
                hint=f"hutch image pull {ref} (or import it again)",
            )
        return ResolvedImage(id=row["id"], ref=ref, rootfs=rootfs, config=image_config(row["config"]))

    # -- what is shown -----------------------------------------------------------------

    def describe(self, row: dict[str, Any], sandboxes: list[str] | None = None, owner: str | None = None) -> dict[str, Any]:
        """An image as the API shows it (``wire.ImageRecord``), with ``owner``'s names (None: everyone's)."""
        cfg = image_config(row["config"])
        names = row["names"] if "names" in row else self.rows.names(row["id"], owner)
        return {
            "id": row["id"],
            "names": [refs.familiar(n) for n in names if "@" not in n],
            "digests": sorted({refs.familiar(n) for n in names if "@" in n}),
            "digest": row["manifest_digest"],
            "platform": row["platform"],
            "size": row["size"],
            "created": str(row["config"].get("created") or ""),
            "stored_at": row["created_at"],
            "source": row["source"],
            "layers": row["layers"],
            "config": {
                "env": list(cfg.env),
                "entrypoint": list(cfg.entrypoint),
                "cmd": list(cfg.cmd),
                "workdir": cfg.workdir,
                "user": cfg.user,
                "labels": cfg.labels,
            },
            "rootfs": str(self.rootfs_path(row["id"])),
            "sandboxes": sandboxes or [],
        }

    # -- removing ----------------------------------------------------------------------

    def remove(self, text: str, owner: str | None = None, prefer: str | None = None) -> tuple[dict[str, Any], list[str], bool]:
        """Untag the name ``text`` (its owner lets the image go with its last tag); an id: ``owner``
        lets the image go (None: it goes for every owner). The row, the names removed, whether the
        image went from the store."""
        found = self._find(text, owner, prefer)
        row = self.rows.get(found[1]) if found is not None else None
        if found is None or row is None:
            return self.lookup(text, owner, prefer), [], False  # raises not_found
        whose, image_id = found
        if whose is not None:  # a name: that owner's
            name = refs.parse_registry(text).name
            self.rows.untag(name, whose)
            if all("@" in n for n in self.rows.names(image_id, whose)):  # its last tag: its digest names go too
                _, deleted = self.rows.disown(image_id, whose)
                return row, [name], deleted
            return row, [name], False
        if owner is None:
            return row, self.rows.delete(image_id), True
        names, deleted = self.rows.disown(image_id, owner)
        return row, names, deleted

    def collect(self, keep: set[str], partials: bool = False) -> dict[str, int]:
        """Remove every file no stored image (nor an image in ``keep``, used by a live sandbox) refers
        to: root filesystems, unpacked layers, blobs; with ``partials``, interrupted transfers too.
        Call from a worker thread (it waits for pulls in progress)."""
        report = {"rootfs": 0, "layers": 0, "blobs": 0, "partials": 0, "temporaries": 0, "freed": 0}
        with self.exclusive():
            images = {r["id"]: r for r in self.rows.all()}
            kept_rows = list(images.values())
            kept_ids = set(images) | keep
            live_layers = {layer["diff_id"][7:] for r in kept_rows for layer in r["layers"]}
            live_blobs = {r["manifest_digest"] for r in kept_rows} | {r["id"] for r in kept_rows}
            live_blobs |= {layer["digest"] for r in kept_rows for layer in r["layers"]}
            if any(image_id not in images for image_id in keep):
                # an image removed while a live sandbox uses it: its row no longer says which layers its
                # root filesystem links to, so every unpacked layer stays until that sandbox is gone
                live_layers |= {p.name for p in self._entries(self.layers)}
            for path in self._entries(self.rootfs_dir):
                if "sha256:" + path.name not in kept_ids and not _is_temporary(path.name):
                    report["freed"] += remove_tree(path)
                    report["rootfs"] += 1
            for path in self._entries(self.layers):
                if path.name not in live_layers and not _is_temporary(path.name):  # temporaries: sweep()
                    report["freed"] += remove_tree(path)
                    report["layers"] += 1
            for digest in self.blobs.digests():
                if digest not in live_blobs:
                    report["freed"] += self.blobs.remove(digest)
                    report["blobs"] += 1
            if partials:
                freed = self.blobs.stale_partials()
                report["freed"] += freed
                report["partials"] += int(freed > 0)
        if partials:  # and what an interrupted unpack or flatten left
            swept = self.sweep()
            report["freed"] += swept["freed"]
            report["temporaries"] = swept["temporaries"]
        return report

    def sweep(self) -> dict[str, int]:
        """Remove what an interrupted pull, import or build left (a daemon killed mid-unpack leaves
        ``.NAME.unpack-*`` and ``.NAME.flatten-*`` directories, scratch layers and the blob an import was writing):
        everything under ``tmp/`` but the partial blobs a pull resumes from, and any temporary
        directory beside ``layers/`` and ``rootfs/`` entries. Waits for transfers in progress (it
        holds the store's lock exclusively): call from a worker thread. The count and bytes freed."""
        report = {"temporaries": 0, "freed": 0}
        with self.exclusive():
            found = [p for p in self._entries(self.tmp) if not p.name.endswith(".partial")]
            for parent in (self.layers, self.rootfs_dir):
                found += [p for p in self._entries(parent) if _is_temporary(p.name)]
            for path in found:
                report["freed"] += remove_tree(path)
                report["temporaries"] += 1
        return report

    @staticmethod
    def _entries(path: Path) -> list[Path]:
        try:
            return sorted(path.iterdir())
        except FileNotFoundError:
            return []
