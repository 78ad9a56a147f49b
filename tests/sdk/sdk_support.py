"""Helpers of the SDK tests (a module with its own name: several test folders have a conftest)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ROOT / "workers"
TORCHRUN = Path(sys.executable).parent / "torchrun"

from s3_server import S3_KEY, S3_SECRET, WEED, SeaweedS3, free_port, free_weed_port  # noqa: E402,F401


def torchrun_argv(script: Path, *args: str, nproc: int = 2) -> list[str]:
    """torchrun running ``script`` as ``nproc`` ranks of one node on loopback (a real gloo group)."""
    return [
        str(TORCHRUN), f"--nproc-per-node={nproc}", "--nnodes=1", "--max-restarts=0",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(script), *args,
    ]  # fmt: skip


def flip_byte(path: Path, offset: int = -100) -> None:
    """Corrupt a file in place without changing its size."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
