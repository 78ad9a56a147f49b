"""Bundles: packing is canonical and honours ignore files; every hostile archive is refused, by the
checker and by the unpacker, and nothing is ever written outside the target."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest
import zstandard
from torchyard import bundles
from torchyard.bundles import BundleError, BundleTooLarge, inspect_archive, pack_directory, packing, unpack
from torchyard.bundles.tar import parse_header


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


# --- the streaming reader and the packer's own tar writer ----------------------------------------
def reference_pack(source: Path, dest: Path) -> str:
    """The canonical archive as tarfile itself writes it ('w|', PAX, the same TarInfo objects): what
    pack_directory must reproduce byte for byte, so a bundle's sha256 never depends on our writer."""
    files, links = packing._collect(source)
    entries = sorted([(rel, info, None) for rel, info in files] + [(rel, None, t) for rel, t in links.items()],
                     key=lambda entry: entry[0])
    with open(dest, "wb") as raw:
        compressor = zstandard.ZstdCompressor(level=packing.ZSTD_LEVEL, threads=packing.ZSTD_THREADS,
                                              write_checksum=True)
        with (compressor.stream_writer(raw, closefd=False) as compressed,
              tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar):
            for rel, info, target in entries:
                if info is None:
                    tar.addfile(packing._tarinfo(rel, link=target))
                    continue
                with open(source / rel, "rb") as handle:
                    tar.addfile(packing._tarinfo(rel, size=info.st_size, executable=bool(info.st_mode & 0o100)), handle)
    return bundles.sha256_file(dest)


def test_packing_writes_exactly_the_bytes_tarfile_would(tmp_path):
    project = make_project(tmp_path / "project")
    (project / ("long-" * 30 + ".py")).write_text("x = 1\n")  # a name past ustar's 100 bytes: a pax header
    (project / "naïve café.py").write_text("y = 2\n")  # non-ASCII: a pax header too
    (project / "big.bin").write_bytes(os.urandom(3 << 20))  # several megabyte writes
    (project / "exactly-512.bin").write_bytes(b"z" * 512)
    packed = pack_directory(project, tmp_path / "ours.tar.zst")
    assert packed.sha256 == reference_pack(project, tmp_path / "theirs.tar.zst")
    target = tmp_path / "out"
    info = unpack(packed.path, target)
    assert (target / ("long-" * 30 + ".py")).read_text() == "x = 1\n"
    assert (target / "naïve café.py").read_text() == "y = 2\n"
    assert (target / "big.bin").read_bytes() == (project / "big.bin").read_bytes()
    assert info.sha256 == packed.sha256 and info.compressed_size == packed.size


def test_gnu_long_names_and_global_pax_headers_are_read_as_tarfile_reads_them(tmp_path):
    name = "d/" + "n" * 150 + ".py"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = member(name)
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    raw_pax = io.BytesIO()
    with tarfile.open(fileobj=raw_pax, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}) as tar:
        info = member("g.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"g"))
    for body, path in ((raw.getvalue(), name), (raw_pax.getvalue(), "g.py")):
        assert [f["path"] for f in inspect_archive(io.BytesIO(body)).files] == [path]


def test_unpack_stream_commits_nothing_when_the_bytes_do_not_hash_to_the_name(tmp_path):
    packed = pack_directory(make_project(tmp_path / "project"), tmp_path / "a.tar.zst")
    target = tmp_path / "out"
    with open(packed.path, "rb") as handle, pytest.raises(bundles.BundleHashMismatch):
        bundles.unpack_stream(handle, target, sha256="0" * 64)
    assert not target.exists()
    assert bundle_threads() == []
    with open(packed.path, "rb") as handle:
        info = bundles.unpack_stream(handle, target, sha256=packed.sha256, read_only=True)
    assert info.sha256 == packed.sha256
    assert not (target / "train.py").stat().st_mode & 0o222 and os.access(target / "train.py", os.X_OK)


class FailingSource(io.RawIOBase):
    """A download whose connection drops after `good` bytes."""

    def __init__(self, data: bytes, good: int) -> None:
        self.data, self.good, self.pos = data, good, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.pos >= self.good:
            raise ConnectionResetError("connection reset by peer")
        chunk = self.data[self.pos:min(self.pos + (size if size > 0 else 1 << 20), self.good)]
        self.pos += len(chunk)
        return chunk


def test_a_failing_download_is_a_read_error_not_a_refusal_and_leaves_nothing(tmp_path):
    project = make_project(tmp_path / "project")
    (project / "big.bin").write_bytes(os.urandom(2 << 20))
    data = pack_directory(project, tmp_path / "a.tar.zst").path.read_bytes()
    target = tmp_path / "out"
    with pytest.raises(bundles.BundleReadError, match="connection reset by peer") as failed:
        bundles.unpack_stream(FailingSource(data, len(data) // 2), target)
    assert isinstance(failed.value.__cause__, ConnectionResetError)
    assert not isinstance(failed.value, BundleError)
    assert not target.exists()
    assert bundle_threads() == []  # the decoder's and the digest's threads ended with it


def bundle_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("bundle-")]


REFUSED = {"negative size": "a negative size", "malformed pax": "a malformed pax header", "sparse": "s: is a sparse file",
           "trailing bytes": "after the end of its tar archive", "truncated": "it ends inside a member"}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_it_refuses_what_a_sane_archive_never_holds(case, tmp_path):
    good = tar_bytes([(member("a.py"), b"x")], compress="plain")
    if case == "negative size":
        header = bytearray(good[:512])
        header[124:136] = b"\xff" * 12  # base-256: a negative number
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
        body = bytes(header) + good[512:]
    elif case == "malformed pax":
        info = member("a.py")
        info.pax_headers = {"comment": "x"}
        body = tar_bytes([(info, b"x")], compress="plain").replace(b"13 comment=x\n", b"99 comment=x\n")
    elif case == "sparse":
        body = tar_bytes([(member("s", tarfile.GNUTYPE_SPARSE), None)], compress="plain")
    elif case == "trailing bytes":
        body = good + b"\0" * (5 << 20)
    else:
        body = good[:700]
    with pytest.raises(BundleError, match=REFUSED[case]):
        inspect_archive(io.BytesIO(body))
    with pytest.raises(BundleError, match=REFUSED[case]):
        bundles.unpack_stream(io.BytesIO(body), tmp_path / "out")
    assert bundle_threads() == []
    assert not (tmp_path / "out").exists()


def test_a_bomb_stops_at_the_first_implausible_megabytes_whatever_its_headers_claim(tmp_path):
    # One member that says it is 150 MB of zeros: refused by the ratio of what was actually produced,
    # long before 150 MB were written.
    body = tar_bytes([(member("zeros.bin"), b"\0" * (150 << 20))])
    with pytest.raises(BundleError, match="implausible compression ratio"):
        bundles.unpack_stream(io.BytesIO(body), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_functions_payload_unpacks_whatever_its_ratio_within_the_size_limit(tmp_path):
    # A function's pickled array of zeros: judged by its size (bundles.PAYLOAD_RATIO), the node
    # unpacks it; past the size limit it is still refused.
    body = tar_bytes([(member("function.pkl"), b"\0" * (40 << 20)), (member("function.json"), b"{}")])
    info = bundles.unpack_stream(io.BytesIO(body), tmp_path / "out", max_ratio=bundles.PAYLOAD_RATIO)
    assert info.unpacked_size == (40 << 20) + 2 and (tmp_path / "out" / "function.pkl").stat().st_size == 40 << 20
    with pytest.raises(BundleError, match="unpacks to more than"):
        bundles.unpack_stream(io.BytesIO(body), tmp_path / "again", max_ratio=bundles.PAYLOAD_RATIO,
                              max_unpacked_bytes=20 << 20)
    assert not (tmp_path / "again").exists()


def test_files_of_many_directories_unpack_whole_and_a_hard_link_finds_its_target(tmp_path):
    # Every file whole whichever directory it is in, and a hard link to a file of another directory.
    contents = {f"d{i % 7}/f{i}.py": os.urandom(1000 + i) for i in range(60)}
    members = [(member(name), data) for name, data in contents.items()]
    members.append((member("z/link", tarfile.LNKTYPE, "d3/f3.py"), None))
    target = tmp_path / "out"
    info = bundles.unpack_stream(io.BytesIO(tar_bytes(members)), target)
    assert {f["path"] for f in info.files} == set(contents) | {"z/link"}
    assert all((target / name).read_bytes() == data for name, data in contents.items())
    assert (target / "z/link").stat().st_ino == (target / "d3/f3.py").stat().st_ino


def _headers() -> list[tuple[str, bytes]]:
    """512-byte headers of every shape: what pack_directory writes, tarfile's ustar, GNU and pax
    formats, a ustar name split into prefix and name, v7 directories, links, base-256 sizes."""
    cases = []
    long_dir = "a" * 90 + "/" + "b" * 60
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        for name, kind, link in ((f"{long_dir}/file.py", tarfile.REGTYPE, ""), ("dir/", tarfile.DIRTYPE, ""),
                                 ("l", tarfile.SYMTYPE, "dir/x"), ("h", tarfile.LNKTYPE, "dir/y"),
                                 ("v7dir/", tarfile.AREGTYPE, ""), ("exe", tarfile.REGTYPE, "")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size, info.mode = kind, link, 1234 if kind == tarfile.REGTYPE else 0, 0o755
            cases.append((f"{fmt}:{name[-8:]}", info.tobuf(fmt, "utf-8", "surrogateescape")[-512:]))
    big = tarfile.TarInfo("big.bin")
    big.size = 9 << 33  # over 8 GiB: base-256 in a GNU header
    cases.append(("base-256", big.tobuf(tarfile.GNU_FORMAT)[-512:]))
    return cases


@pytest.mark.parametrize(("label", "block"), _headers())
def test_the_header_fast_path_reads_what_tarfile_reads(label, block):
    fast, slow = parse_header(block), tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    assert (fast.name, fast.mode, fast.size, fast.type, fast.linkname) == \
        (slow.name, slow.mode, slow.size, slow.type, slow.linkname), label


def test_the_header_fast_path_refuses_a_wrong_checksum_and_takes_a_signed_one():
    block = bytearray(tarfile.TarInfo("x.py").tobuf(tarfile.USTAR_FORMAT))
    block[0:1] = b"y"  # the checksum no longer matches
    with pytest.raises(tarfile.HeaderError):
        parse_header(bytes(block))
    signed = bytearray(tarfile.TarInfo("\u00e9.py").tobuf(tarfile.USTAR_FORMAT))
    # An old tar's signed checksum: bytes over 127 counted negative.
    signed[148:156] = b"%06o\0 " % (sum(b if b < 128 else b - 256 for b in signed[:148] + signed[156:]) + 256)
    assert parse_header(bytes(signed)).name == "\u00e9.py"
