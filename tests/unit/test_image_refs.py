"""Image references (hutch.imageref): the grammar docker pull uses, the local sources, and the image table."""

from __future__ import annotations

from pathlib import Path

import pytest

from hutch.errors import ConflictError, InvalidError
from hutch.imageref import LocalRef, RegistryRef, familiar, image_id, parse, parse_registry
from hutch.store import Store

H = "a" * 64


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("python:3.12-slim", ("docker.io", "library/python", "3.12-slim", None)),
        ("debian", ("docker.io", "library/debian", None, None)),
        ("docker.io/library/debian:bookworm", ("docker.io", "library/debian", "bookworm", None)),
        ("index.docker.io/team/img", ("docker.io", "team/img", None, None)),
        ("team/img:1", ("docker.io", "team/img", "1", None)),
        ("localhost:5000/team/img:tag", ("localhost:5000", "team/img", "tag", None)),
        ("127.0.0.1:5000/x", ("127.0.0.1:5000", "x", None, None)),
        ("ghcr.io/o/r/n@sha256:" + H, ("ghcr.io", "o/r/n", None, "sha256:" + H)),
        ("reg.example:443/a:b@sha256:" + H, ("reg.example:443", "a", "b", "sha256:" + H)),
    ],
)
def test_registry_references_normalise_like_docker_pull(text: str, want: tuple[str, str, str | None, str | None]) -> None:
    ref = parse(text)
    assert isinstance(ref, RegistryRef)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == want


def test_names_loopback_and_familiar_forms() -> None:
    assert parse_registry("python:3.12").name == "docker.io/library/python:3.12"
    assert parse_registry("python").name == "docker.io/library/python:latest"
    assert parse_registry("python").api_host == "registry-1.docker.io"
    assert parse_registry("localhost:5000/a").loopback and parse_registry("127.0.0.1:1/a").loopback
    assert not parse_registry("ghcr.io/a").loopback
    assert familiar("docker.io/library/python:3.12") == "python:3.12"
    assert familiar("docker.io/team/img:1") == "team/img:1"
    assert familiar("localhost:5000/a:b") == "localhost:5000/a:b"


@pytest.mark.parametrize(
    "text",
    ["", "Python:3", "a b", "x:", "x@sha256:abc", "x@md5:" + H, "-x", "x//y", "x:" + "t" * 129, "a" * 300, "ok\x00"],
)
def test_bad_references_are_invalid_with_the_forms_as_hint(text: str) -> None:
    with pytest.raises(InvalidError) as err:
        parse(text)
    assert err.value.kind == "invalid" and "python:3.12-slim" in (err.value.hint or "")


def test_local_sources(tmp_path: Path) -> None:
    assert parse("-") == LocalRef("stdin", "")
    assert parse("oci-archive:/x/img.tar") == LocalRef("oci-archive", "/x/img.tar")
    assert parse("docker-archive:img.tar") == LocalRef("docker-archive", "img.tar")
    assert parse("rootfs:/srv/root") == LocalRef("rootfs", "/srv/root")
    assert parse(f"oci:{tmp_path}") == LocalRef("oci", str(tmp_path))
    assert parse(f"oci:{tmp_path}:v1") == LocalRef("oci", str(tmp_path), "v1")
    with pytest.raises(InvalidError):
        parse("oci-archive:")
    assert image_id("sha256:" + H) == H and image_id("abcdef12") == "abcdef12" and image_id("python") is None


def test_the_image_table_records_names_and_finds_ids(tmp_path: Path) -> None:
    store = Store(tmp_path / "hutch.db")
    assert "0007_images" in store.db.migrations()
    row = {"manifest_digest": "sha256:" + "b" * 64, "manifest": {}, "config": {"os": "linux"}, "layers": []}
    row |= {"size": 1, "platform": "linux/amd64", "source": "pull x"}
    store.images.put(row | {"id": "sha256:" + "ab" * 32}, ["docker.io/library/x:1", "docker.io/library/x:latest"])
    store.images.put(row | {"id": "sha256:" + "ac" * 32}, ["docker.io/library/x:latest"])  # the tag moves
    assert store.images.by_name("docker.io/library/x:latest") == "sha256:" + "ac" * 32
    assert store.images.by_prefix("abab") == "sha256:" + "ab" * 32
    with pytest.raises(ConflictError):
        store.images.by_prefix("a")
    assert [r["names"] for r in store.images.all()] == [["docker.io/library/x:latest"], ["docker.io/library/x:1"]]
    assert store.images.untag("docker.io/library/x:1") and store.images.delete_if_unnamed("sha256:" + "ab" * 32)
    assert store.images.get("sha256:" + "ab" * 32) is None
    assert store.images.delete("sha256:" + "ac" * 32) == ["docker.io/library/x:latest"]
