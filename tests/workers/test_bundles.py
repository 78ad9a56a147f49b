"""Bundles: packing is canonical and honours ignore files; every hostile archive is refused, by the
checker and by the unpacker, and nothing is ever written outside the target."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest
import zstandard
from torchyard import bundles
from torchyard.bundles import BundleError, BundleTooLarge, inspect_archive, pack_directory, unpack


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]], compress: str = "zstd") -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    body = raw.getvalue()
    if compress == "zstd":
        return zstandard.ZstdCompressor().compress(body)
    if compress == "gzip":
        return gzip.compress(body)
    return body


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


HOSTILE = {
    "absolute path": ([(member("/etc/evil"), b"x")], "/etc/evil: has an absolute path"),
    "dot-dot": ([(member("a/../../evil"), b"x")], "a/../../evil: has a '..' component"),
    "symlink out": ([(member("link", tarfile.SYMTYPE, "/etc"), None)], "link: is a symlink to '/etc', outside"),
    "relative symlink out": ([(member("d/link", tarfile.SYMTYPE, "../../x"), None)], "d/link: is a symlink to '../../x'"),
    "write through symlink": (
        [(member("inner", tarfile.SYMTYPE, "sub"), None), (member("inner/file"), b"x")],
        "inner/file: is written through the symlink inner",
    ),
    "hard link out": ([(member("hard", tarfile.LNKTYPE, "/etc/passwd"), None)], "hard: is a hard link to '/etc/passwd'"),
    "device": ([(member("dev", tarfile.CHRTYPE), None)], "dev: is a device file"),
    "fifo": ([(member("pipe", tarfile.FIFOTYPE), None)], "pipe: is a FIFO"),
    "duplicate": ([(member("a.py"), b"1"), (member("a.py"), b"2")], "a.py: appears twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_it_refuses_a_hostile_member_naming_it(case, tmp_path):
    members, message = HOSTILE[case]
    archive = tmp_path / "evil.tar.zst"
    archive.write_bytes(tar_bytes(members))
    with pytest.raises(BundleError) as refused:
        inspect_archive(archive.open("rb"))
    assert message in str(refused.value)
    # The node unpacks with the same rules (the server's check is not trusted), and leaves nothing.
    target = tmp_path / "out"
    with pytest.raises(BundleError):
        unpack(archive, target)
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.tar.zst"]


@pytest.mark.parametrize("body", [b"", b"just some text, not an archive", b"\x28\xb5\x2f\xfd garbage"])
def test_it_refuses_what_is_not_an_archive(body, tmp_path):
    with pytest.raises(BundleError, match="not a readable tar archive"):
        inspect_archive(io.BytesIO(body))


def test_it_refuses_a_bomb_by_size_and_by_ratio():
    zeros = tar_bytes([(member("zeros.bin"), b"\0" * (40 << 20))])
    assert len(zeros) < 100_000  # 40 MB of zeros compress to almost nothing
    with pytest.raises(BundleError, match="implausible compression ratio"):
        inspect_archive(io.BytesIO(zeros))
    with pytest.raises(BundleError, match="unpacks to more than"):
        inspect_archive(io.BytesIO(zeros), max_unpacked_bytes=10 << 20, max_ratio=10**9)


def test_gzip_and_plain_tar_archives_are_read_too():
    for compress in ("gzip", "plain"):
        info = inspect_archive(io.BytesIO(tar_bytes([(member("train.py"), b"print(1)\n")], compress)))
        assert info.files == [{"path": "train.py", "size": 9, "mode": 0o644}]


def make_project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("import pkg\n")
    os.chmod(root / "train.py", 0o755)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "data.bin").write_bytes(os.urandom(50_000))
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "run.log").write_text("x")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("x")
    (root / "pkg" / ".gitignore").write_text("local.txt\n")
    (root / "pkg" / "local.txt").write_text("x")
    (root / ".torchyardignore").write_text("secrets.env\n")
    (root / "secrets.env").write_text("TOKEN=1")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"x")
    (root / "latest").symlink_to("pkg/data.bin")
    return root


def test_packing_is_canonical_and_honours_ignore_files(tmp_path):
    project = make_project(tmp_path / "project")
    first = pack_directory(project, tmp_path / "a.tar.zst")
    os.utime(project / "train.py", (1, 1))  # times and owners never change the bytes
    second = pack_directory(project, tmp_path / "b.tar.zst")
    assert first.sha256 == second.sha256 == bundles.sha256_file(first.path)
    assert sorted(first.files) == [".gitignore", ".torchyardignore", "latest", "pkg/.gitignore",
                                   "pkg/__init__.py", "pkg/data.bin", "train.py"]
    (project / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    assert pack_directory(project, tmp_path / "c.tar.zst").sha256 != first.sha256

    target = tmp_path / "unpacked"
    info = unpack(first.path, target)
    assert info.unpacked_size == first.unpacked_size
    assert (target / "pkg" / "data.bin").read_bytes() == (project / "pkg" / "data.bin").read_bytes()
    assert os.access(target / "train.py", os.X_OK) and os.readlink(target / "latest") == "pkg/data.bin"


def test_packing_names_the_biggest_files_past_the_limit_and_refuses_links_out(tmp_path):
    project = make_project(tmp_path / "project")
    with pytest.raises(BundleTooLarge) as refused:
        pack_directory(project, tmp_path / "a.tar.zst", max_unpacked_bytes=10_000)
    assert refused.value.biggest[0] == ("pkg/data.bin", 50_000)
    assert "pkg/data.bin (50.0 kB)" in str(refused.value) and ".torchyardignore" in str(refused.value)
    (project / "escape").symlink_to("/etc")
    with pytest.raises(BundleError, match="escape: is a symlink to /etc, outside the project"):
        pack_directory(project, tmp_path / "b.tar.zst")
