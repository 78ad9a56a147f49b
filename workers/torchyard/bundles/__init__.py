"""Code bundles: a user's project directory as one content-addressed, canonical archive.

A bundle is a zstd-compressed POSIX tar whose entries are sorted, owned by 0:0, dated 0 and moded
0644/0755, so the same directory always packs to the same bytes and its sha256 names it: an
unchanged project uploads nothing. The CLI packs (`pack_directory`), the server checks an upload
(`inspect_archive`) before it stores it, and the node that runs it checks again while unpacking
(`unpack_stream`, as the download arrives, hashing it on the way): an archive is hostile until
proven otherwise, wherever it came from.

Refused, naming the member: absolute paths, `..` components, symlinks or hard links that lead
outside the bundle, members written through a symlink, device files, FIFOs and sparse files, more
than MAX_MEMBERS entries, an unpacked size over the limit, an implausible compression ratio (a
bomb), more than padding after the archive's end, and anything that is not a tar archive (zstd,
gzip or plain; bzip2 and xz are read too, as tarfile read them).

Modules: packing (the canonical archive), unpacking (reading one to its end: inspect or unpack),
decoding (the raw bytes hashed and decompressed on threads of their own), tar (the tar reader, by
hand for speed), checks (limits, member rules, the bomb check, the errors), hashing; and the node's
side: cache (the machine's bundle cache: fetch, verify, commit, copy out), manifest (a cache entry's
manifest, verified by lstat), workdirs (a node's working directory, copied from an entry). The
format's names are importable from this package; the cache's from `torchyard.bundles.cache`.
"""

from .checks import (
    DEFAULT_MAX_BYTES,
    MAX_MEMBERS,
    MAX_RATIO,
    PAYLOAD_RATIO,
    RATIO_CHECKED_ABOVE,
    BundleError,
    BundleHashMismatch,
    BundleInfo,
    BundleTooLarge,
    size_text,
)
from .decoding import PROGRESS_EVERY, BundleReadError, Readable
from .hashing import sha256_file
from .packing import ARCHIVE_SUFFIX, PackedBundle, pack_directory
from .unpacking import inspect_archive, unpack, unpack_stream

__all__ = [
    "ARCHIVE_SUFFIX",
    "DEFAULT_MAX_BYTES",
    "MAX_MEMBERS",
    "MAX_RATIO",
    "PAYLOAD_RATIO",
    "PROGRESS_EVERY",
    "RATIO_CHECKED_ABOVE",
    "BundleError",
    "BundleHashMismatch",
    "BundleInfo",
    "BundleReadError",
    "BundleTooLarge",
    "PackedBundle",
    "Readable",
    "inspect_archive",
    "pack_directory",
    "sha256_file",
    "size_text",
    "unpack",
    "unpack_stream",
]
