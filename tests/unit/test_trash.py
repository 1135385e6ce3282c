"""The trash (providers/local/trash.py): a destroyed sandbox's directory leaves at once and is
deleted behind the destroy; no more than PENDING wait (past that, or when it cannot be moved,
it is deleted at once); what a previous daemon left is swept."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hutch.providers.local import trash as trash_mod
from hutch.providers.local.trash import PENDING, Trash


def tree(where: Path, files: int = 20) -> Path:
    (where / "workspace" / "deep").mkdir(parents=True)
    for i in range(files):
        (where / "workspace" / "deep" / f"f{i}").write_text("x" * 100)
    return where


def test_a_directory_leaves_at_once_and_is_deleted_behind(tmp_path: Path) -> None:
    bin_ = Trash(tmp_path / "trash")
    sandboxes = tmp_path / "sandboxes"
    first, second = tree(sandboxes / "sbx_1"), tree(sandboxes / "sbx_2")
    bin_.discard(first)
    assert not first.exists() and second.exists()  # gone from where it was when discard returns
    bin_.discard(second)
    bin_.wait()
    assert list((tmp_path / "trash").iterdir()) == [] and list(sandboxes.iterdir()) == []
    assert oct((tmp_path / "trash").stat().st_mode & 0o777) == "0o700"


def test_the_deletion_runs_outside_the_daemon_and_finishes_what_rm_cannot(tmp_path: Path) -> None:
    """rm -rf in a process of its own (no GIL shared with the daemon's event loop); as a user, a
    directory rm may not enter is left to host.rmtree, which opens it first (as root, rm does all)."""
    d = tree(tmp_path / "x")
    (d / "workspace" / "deep").chmod(0o000)
    trash_mod._remove(d)
    assert not d.exists()


def test_no_more_than_pending_wait_then_a_discard_deletes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = threading.Event()
    real = trash_mod._remove

    def slow(path: Path) -> None:  # the worker stands still on what is in the trash
        held.wait(60)
        real(path)

    monkeypatch.setattr(trash_mod, "_remove", slow)
    bin_ = Trash(tmp_path / "trash")
    dirs = [tree(tmp_path / "sandboxes" / f"sbx_{i}", 2) for i in range(PENDING + 1)]
    try:
        for d in dirs[:PENDING]:
            assert bin_.throw(d)
        assert not bin_.throw(dirs[-1]) and dirs[-1].exists()  # full: the caller deletes
        bin_.discard(dirs[-1])
        assert not dirs[-1].exists() and len(list((tmp_path / "trash").iterdir())) == PENDING
    finally:
        held.set()
    bin_.wait()
    assert list((tmp_path / "trash").iterdir()) == []
    assert bin_.throw(tree(tmp_path / "sandboxes" / "sbx_after", 2))  # room again
    bin_.wait()


def test_what_cannot_be_moved_is_deleted_in_place(tmp_path: Path) -> None:
    (tmp_path / "trash").write_text("not a directory")  # the trash cannot be made
    bin_ = Trash(tmp_path / "trash")
    d = tree(tmp_path / "sandboxes" / "sbx_1")
    assert not bin_.throw(d) and d.exists()
    bin_.discard(d)
    assert not d.exists()
    bin_.discard(tmp_path / "sandboxes" / "never-made")  # nothing there: nothing to do, no error


def test_what_a_previous_daemon_left_is_swept(tmp_path: Path) -> None:
    left = [tree(tmp_path / "trash" / f"sbx_{i}.0123abcd") for i in range(3)]
    Trash(tmp_path / "trash").sweep()  # nothing thrown yet: the sweep starts the deleting
    bin_ = Trash(tmp_path / "trash")
    bin_.sweep()
    bin_.wait()
    assert not any(p.exists() for p in left)
